/// The files of the web UI, compiled into `hauld` so that the binary is all there is to install.
enum WebAssets {
    /// Path → (content type, body).
    static let files: [String: (contentType: String, body: String)] = [
        "/": ("text/html; charset=utf-8", indexHTML),
        "/app.js": ("text/javascript; charset=utf-8", appJS),
        "/app.css": ("text/css; charset=utf-8", appCSS),
    ]
}
