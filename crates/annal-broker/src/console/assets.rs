//! The console's static files, embedded with `include_str!` so that `annal serve` serves them with no extra step
//! and `cargo build` needs no front-end toolchain. Plain ES modules and CSS: there is no build step to run.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::Broker;

/// One embedded file: its URL path, its content type, its bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/console/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("web/app.js"),
    },
    Asset {
        path: "/console/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("web/style.css"),
    },
];

const INDEX_HTML: &str = include_str!("web/index.html");

/// `/` (the page) and every embedded file under `/console/`.
pub fn router() -> Router<Arc<Broker>> {
    let mut router = Router::new().route("/", get(index));
    for asset in ASSETS {
        router = router.route(
            asset.path,
            get(move || async move {
                (
                    [
                        (header::CONTENT_TYPE, asset.content_type),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    asset.body,
                )
            }),
        );
    }
    router
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            // The page loads only its own script and style, and talks only to its own origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
        ],
        INDEX_HTML,
    )
}
