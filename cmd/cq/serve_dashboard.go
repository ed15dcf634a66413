package main

import (
	"embed"
	"net/http"
)

// The dashboard (docs/serve.md): plain HTML, CSS and JavaScript embedded
// in the binary, nothing fetched from elsewhere. It reads GET /state once,
// then follows GET /events.
//
//go:embed dashboard/index.html dashboard/style.css dashboard/app.js
var dashboardFS embed.FS

// dashboardAsset reports whether path is the dashboard's page or one of
// its files: static, public, served without the token.
func dashboardAsset(path string) bool {
	switch path {
	case "/", "/dashboard/style.css", "/dashboard/app.js":
		return true
	}
	return false
}

// serveDashboard serves the page at / and its assets under /dashboard/.
func serveDashboard() http.Handler {
	files := http.FileServerFS(dashboardFS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Everything is in the binary: no other origin is needed, and
		// nothing may frame the page.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, dashboardFS, "dashboard/index.html")
			return
		}
		files.ServeHTTP(w, r)
	})
}
