package main

// cq serve's endpoints over queues, workers and health (docs/serve.md):
// GET /queues, POST /queues/{name}, GET /workers, GET /health, GET
// /metrics. Each runs what the command line runs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
)

// getQueues is GET /queues: cq queue ls -o json.
func (s *gwServer) getQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.st.Queues(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	if qs == nil {
		qs = []queue.Queue{}
	}
	writeHTTPJSON(w, http.StatusOK, qs)
}

// getSchedules is GET /schedules: cq schedule ls -o json.
func (s *gwServer) getSchedules(w http.ResponseWriter, r *http.Request) {
	list, err := s.st.ScheduleList(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	if list == nil {
		list = []queue.Schedule{}
	}
	writeHTTPJSON(w, http.StatusOK, list)
}

// getSchedule is GET /schedules/{name}: cq schedule show -o json.
func (s *gwServer) getSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := s.st.ScheduleGet(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeHTTPJSON(w, http.StatusOK, sc)
}

// postQueue is POST /queues/{name}: cq queue set's settings as a JSON
// object, named as its flags or as cq queue ls -o json's fields
// ("transient-retries" or "transient_retries"), plus "paused" for cq
// queue pause and resume; an empty body only makes the queue exist, as
// a bare cq queue set does. The answer is the queue as cq queue ls -o
// json prints it.
func (s *gwServer) postQueue(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, gwSpecLimit)
	if err != nil {
		s.fail(w, err)
		return
	}
	set, paused, err := queueSettingsJSON(body)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	ctx, name := context.WithoutCancel(r.Context()), r.PathValue("name")
	// As cq queue set, then cq queue pause or resume: each its own event.
	if set != (queue.QueueSettings{}) || paused == nil {
		if err := s.st.SetQueue(ctx, name, set); err != nil {
			s.fail(w, err)
			return
		}
	}
	if paused != nil {
		if err := s.st.SetQueue(ctx, name, queue.QueueSettings{Paused: paused}); err != nil {
			s.fail(w, err)
			return
		}
	}
	qs, err := s.st.Queues(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	i := slices.IndexFunc(qs, func(q queue.Queue) bool { return q.Name == name })
	if i < 0 {
		s.fail(w, errors.New("the queue is not listed after it was set"))
		return
	}
	writeHTTPJSON(w, http.StatusOK, qs[i])
}

// queueSettingsJSON reads POST /queues/{name}'s body: the settings, and
// paused when given.
func queueSettingsJSON(body []byte) (queue.QueueSettings, *bool, error) {
	var set queue.QueueSettings
	var paused *bool
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return set, nil, nil
	}
	var fields map[string]json.RawMessage
	if t[0] != '{' {
		return set, nil, usageErr("bad request body: want a JSON object of settings")
	}
	if err := json.Unmarshal(t, &fields); err != nil {
		return set, nil, usageErr("bad request body: %s", gwJSONText(err))
	}
	for _, k := range sortedKeys(fields) {
		name := strings.ReplaceAll(k, "_", "-")
		var v any
		dec := json.NewDecoder(bytes.NewReader(fields[k]))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return set, nil, usageErr("%s: %s", k, gwJSONText(err))
		}
		if name == "paused" {
			b, ok := v.(bool)
			if !ok {
				return set, nil, usageErr("%s: want true or false", k)
			}
			paused = &b
			continue
		}
		if !slices.Contains(queueSettingNames, name) {
			return set, nil, usageErr("unknown setting %q (want %s or paused)", k, strings.Join(queueSettingNames, ", "))
		}
		text, err := queueSettingText(name, v)
		if err == nil {
			err = setQueueSetting(&set, name, text)
		}
		if err != nil {
			return set, nil, usageErr("%s: %v", k, err)
		}
	}
	return set, paused, nil
}

// queueSettingText is a setting's JSON value as cq queue set's flag
// would take it: a whole number for a count, a duration string for a
// time ("30s"; 0 too), true or false.
func queueSettingText(name string, v any) (string, error) {
	switch name {
	case "concurrency", "retries", "transient-retries", "timeout-retries":
		if n, ok := v.(json.Number); ok {
			return n.String(), nil
		}
		return "", errors.New("want a whole number")
	case "timeout-counts-asks":
		switch b := v.(type) {
		case bool:
			return strconv.FormatBool(b), nil
		case string:
			return b, nil
		}
		return "", errors.New("want true or false")
	}
	switch d := v.(type) {
	case string:
		return d, nil
	case json.Number:
		if d.String() == "0" {
			return "0", nil
		}
	}
	return "", errors.New(`want a duration such as "30s", "10m" or "1h30m"`)
}

// getWorkers is GET /workers: cq workers -o json.
func (s *gwServer) getWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.st.Workers(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	if ws == nil {
		ws = []queue.Worker{}
	}
	writeHTTPJSON(w, http.StatusOK, ws)
}

// gwThresholds are the thresholds of a GET /health or /metrics: cq
// health's defaults, changed by parameters named as its flags.
func gwThresholds(r *http.Request) (queue.Thresholds, error) {
	th := queue.DefaultThresholds()
	var heartbeatAge, window string
	fs := gwFlagSet("health")
	thresholdFlags(fs, &th, &heartbeatAge, &window)
	if err := gwQueryFlags(fs, r.URL.Query()); err != nil {
		return th, err
	}
	if err := setThresholdTimes(&th, heartbeatAge, window); err != nil {
		return th, err
	}
	return th, checkThresholds(th)
}

// getHealth is GET /health: cq health -o json, HTTP 200 when ok or
// degraded, 503 when unhealthy, and 503 with an error (code 3, as cq
// health exits) when the store cannot be read.
func (s *gwServer) getHealth(w http.ResponseWriter, r *http.Request) {
	th, err := gwThresholds(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	h, err := s.st.Health(r.Context(), th)
	if err != nil {
		err = s.st.Backend().Explain(err)
		if sw, ok := w.(*gwStatusWriter); ok {
			sw.err = err
		}
		writeHTTPJSON(w, http.StatusServiceUnavailable, gwErrorBody{Error: "cannot read the store: " + errorText(err), Code: healthUnreadable})
		return
	}
	status := http.StatusOK
	if h.Status == queue.HealthUnhealthy {
		status = http.StatusServiceUnavailable
	}
	writeHTTPJSON(w, status, h)
}

// prometheusType is the Content-Type of the Prometheus text format.
const prometheusType = "text/plain; version=0.0.4; charset=utf-8"

// getMetrics is GET /metrics: cq health -o prometheus. A store it
// cannot read gives cq_health_status 3 and cq_store_readable 0, with 200,
// as that command exits 0 whenever it could write the metrics.
func (s *gwServer) getMetrics(w http.ResponseWriter, r *http.Request) {
	th, err := gwThresholds(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	var buf bytes.Buffer
	h, err := s.st.Health(r.Context(), th)
	if err == nil {
		err = writePrometheus(&buf, h)
	} else {
		err = s.st.Backend().Explain(err)
		if sw, ok := w.(*gwStatusWriter); ok {
			sw.err = err
		}
		buf.Reset()
		err = writeUnreadable(&buf, errors.New("cannot read the store: "+errorText(err)))
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", prometheusType)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}
