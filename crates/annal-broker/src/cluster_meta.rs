//! Node identity kept in the data directory (`meta.properties`, as Kafka names it): the cluster id is created on
//! first start and reused forever after; a data directory from another node id is refused.

use std::path::Path;

use anyhow::bail;

use crate::config::parse_properties;
use crate::durable::write_atomic;

pub const META_FILE: &str = "meta.properties";

/// Loads or creates `meta.properties`; returns the cluster id. `given` (`annal serve --cluster-id`) is the id a new
/// directory is created with, and must match an existing directory's; `require_given` refuses to invent a random
/// id (a multi-node cluster, whose nodes must share one).
pub fn load_or_create(
    data_dir: &Path,
    node_id: i32,
    given: Option<&str>,
    require_given: bool,
) -> anyhow::Result<String> {
    let path = data_dir.join(META_FILE);
    if path.exists() {
        let text = std::fs::read_to_string(&path)?;
        let props = parse_properties(&text);
        let get = |k: &str| {
            props
                .iter()
                .find(|(_, key, _)| key == k)
                .map(|(_, _, v)| v.clone())
        };
        let cluster_id = match get("cluster.id") {
            Some(c) if !c.is_empty() => c,
            _ => bail!(
                "{} has no cluster.id; restore it from a backup or move the data directory away",
                path.display()
            ),
        };
        if let Some(n) = get("node.id") {
            if n != node_id.to_string() {
                bail!(
                    "data directory {} belongs to node.id={n}, but this broker is node.id={node_id}; \
                     start with --override node.id={n} or use another --data-dir",
                    data_dir.display()
                );
            }
        }
        if let Some(given) = given {
            if given != cluster_id {
                bail!(
                    "data directory {} belongs to cluster id {cluster_id}, but this node was started with \
                     --cluster-id {given}; point log.dirs at this cluster's directory, or start without \
                     --cluster-id to keep the directory's cluster",
                    data_dir.display()
                );
            }
        }
        return Ok(cluster_id);
    }
    let cluster_id = match given {
        Some(id) if id.trim().is_empty() => bail!("--cluster-id must not be empty"),
        Some(id) => id.trim().to_string(),
        None if require_given => bail!(
            "data directory {} is new and this node is one of several voters: start every node of the \
             cluster with the same --cluster-id ID (22 characters of URL-safe base64, as \
             `kafka-storage random-uuid` prints)",
            data_dir.display()
        ),
        None => new_cluster_id(),
    };
    let text = format!(
        "# Written by Annal on first start; do not edit.\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
    );
    write_atomic(&path, text.as_bytes())?;
    Ok(cluster_id)
}

/// Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 characters).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = String::with_capacity(22);
    for b in bytes {
        bits = (bits << 8) | b as u32;
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cluster_id_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = super::load_or_create(dir.path(), 0, None, false).unwrap();
        assert_eq!(a.len(), 22);
        assert_eq!(
            super::load_or_create(dir.path(), 0, None, false).unwrap(),
            a
        );
        assert_eq!(
            super::load_or_create(dir.path(), 0, Some(&a), true).unwrap(),
            a
        );
        assert!(super::load_or_create(dir.path(), 1, None, false).is_err());
        let err = super::load_or_create(dir.path(), 0, Some("another"), true).unwrap_err();
        assert!(err.to_string().contains("belongs to cluster id"), "{err}");
        let fresh = tempfile::tempdir().unwrap();
        assert!(super::load_or_create(fresh.path(), 0, None, true).is_err());
        assert_eq!(
            super::load_or_create(fresh.path(), 0, Some("c1"), true).unwrap(),
            "c1"
        );
    }
}
