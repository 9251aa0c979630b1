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

/// Every file the page loads: `app.js` (the router) imports `api.js` and `dom.js`, and one module per screen under
/// `views/` when that screen is first shown (`import()`). A module missing here is a 404 in the browser;
/// `every_import_is_embedded` checks the table.
const ASSETS: &[Asset] = &[
    js("/console/app.js", include_str!("web/app.js")),
    js("/console/api.js", include_str!("web/api.js")),
    js("/console/dom.js", include_str!("web/dom.js")),
    js(
        "/console/views/overview.js",
        include_str!("web/views/overview.js"),
    ),
    js(
        "/console/views/topics.js",
        include_str!("web/views/topics.js"),
    ),
    js(
        "/console/views/topic.js",
        include_str!("web/views/topic.js"),
    ),
    js(
        "/console/views/messages.js",
        include_str!("web/views/messages.js"),
    ),
    js(
        "/console/views/produce.js",
        include_str!("web/views/produce.js"),
    ),
    js(
        "/console/views/groups.js",
        include_str!("web/views/groups.js"),
    ),
    js(
        "/console/views/group.js",
        include_str!("web/views/group.js"),
    ),
    js("/console/views/acls.js", include_str!("web/views/acls.js")),
    js(
        "/console/views/users.js",
        include_str!("web/views/users.js"),
    ),
    js(
        "/console/views/login.js",
        include_str!("web/views/login.js"),
    ),
    Asset {
        path: "/console/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("web/style.css"),
    },
];

const fn js(path: &'static str, body: &'static str) -> Asset {
    Asset {
        path,
        content_type: "text/javascript; charset=utf-8",
        body,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The URL path an ES module import resolves to, from the importing module's URL path.
    fn resolve(from: &str, spec: &str) -> String {
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop();
        for piece in spec.split('/') {
            match piece {
                "." => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        parts.join("/")
    }

    /// The relative module specifiers of `body`: static (`from "./x.js"`, which may span lines) and dynamic
    /// (`import("./x.js")`).
    fn imports(body: &str) -> (Vec<&str>, Vec<&str>) {
        let specs = |marker: &str| -> Vec<&str> {
            body.match_indices(marker)
                .map(|(i, m)| body[i + m.len()..].split('"').next().unwrap_or(""))
                .collect()
        };
        (specs(" from \""), specs("import(\""))
    }

    #[test]
    fn every_import_is_embedded() {
        let served: Vec<&str> = ASSETS.iter().map(|a| a.path).collect();
        let mut count = 0;
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let (fixed, dynamic) = imports(asset.body);
            for spec in fixed.into_iter().chain(dynamic) {
                // Only relative imports: there are no external URLs.
                assert!(
                    spec.starts_with('.'),
                    "{} imports {spec}: only relative imports",
                    asset.path
                );
                let target = resolve(asset.path, spec);
                assert!(
                    served.contains(&target.as_str()),
                    "{} imports {spec} ({target}), which is not in ASSETS",
                    asset.path
                );
                count += 1;
            }
        }
        // app.js alone imports the helpers and every screen.
        assert!(count >= 12, "found only {count} imports");
    }

    /// A first visit loads the router, its helpers and one screen: app.js imports every screen lazily, and the
    /// modules every visit loads (app.js, api.js, dom.js) import no screen statically. A screen may share
    /// another's code (acls.js uses topic.js's ACL table): that loads only with it.
    #[test]
    fn screens_are_imported_only_when_shown() {
        let screens: Vec<&str> = ASSETS
            .iter()
            .map(|a| a.path)
            .filter(|p| p.starts_with("/console/views/"))
            .collect();
        let app = ASSETS.iter().find(|a| a.path == "/console/app.js").unwrap();
        let (_, dynamic) = imports(app.body);
        for screen in &screens {
            assert!(
                dynamic.iter().any(|s| resolve(app.path, s) == *screen),
                "app.js does not import({screen}) lazily"
            );
        }
        let every_visit = ["/console/app.js", "/console/api.js", "/console/dom.js"];
        for asset in ASSETS.iter().filter(|a| every_visit.contains(&a.path)) {
            for spec in imports(asset.body).0 {
                let target = resolve(asset.path, spec);
                assert!(
                    !screens.contains(&target.as_str()),
                    "{} imports the screen {target} statically: it would load on every first visit",
                    asset.path
                );
            }
        }
    }

    #[test]
    fn the_page_loads_its_script_and_style_from_the_table() {
        for src in ["/console/app.js", "/console/style.css"] {
            assert!(INDEX_HTML.contains(src), "index.html does not load {src}");
            assert!(
                ASSETS.iter().any(|a| a.path == src),
                "{src} is not embedded"
            );
        }
    }

    /// The screens build the DOM with textContent; data must never reach innerHTML (see web/dom.js).
    #[test]
    fn no_screen_writes_html_strings() {
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!asset.body.contains(banned), "{} uses {banned}", asset.path);
            }
        }
    }
}
