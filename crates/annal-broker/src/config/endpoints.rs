//! Kafka's address syntaxes, parsed: `NAME://host:port` listener lists, `id@host:port` voter lists, `host:port`
//! server lists and `NAME:PROTOCOL` security protocol maps.
//!
//! Each parser returns a [`SettingError`] that names the setting and shows the expected form, so a typo in
//! `server.properties` stops start-up with a message that says where to look. Nothing here knows process roles;
//! [`super::cluster`] applies the rules that relate one setting to another.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

/// A start-up configuration error: which setting is wrong and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct SettingError {
    /// The Kafka name of the setting to fix (e.g. `controller.quorum.voters`).
    pub setting: &'static str,
    /// What is wrong and how to fix it.
    pub problem: String,
}

impl SettingError {
    pub fn new(setting: &'static str, problem: impl Into<String>) -> Self {
        SettingError {
            setting,
            problem: problem.into(),
        }
    }
}

/// Most entries a list setting may hold (listeners, voters, servers, map entries): far above any real cluster,
/// low enough that a runaway generated file is refused rather than walked.
pub const LIST_ENTRIES_MAX: usize = 1024;

/// A host and port, as written in a setting. IPv6 hosts are kept without brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Endpoint {
            host: host.into(),
            port,
        }
    }

    /// True for a host that means "every interface" (`0.0.0.0`, `::`), which no client can connect to.
    pub fn is_wildcard(&self) -> bool {
        matches!(self.host.as_str(), "0.0.0.0" | "::")
    }
}

/// `host:port`, with IPv6 hosts in brackets, so the text can be given to `TcpListener::bind` or a connect call.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Kafka's security protocols. Annal serves PLAINTEXT only for now; the others are recognised so the error can
/// say "not supported yet" instead of "unknown".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Case-insensitive, as Kafka's `SecurityProtocol.forName`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    /// Kafka's `SecurityProtocol` id, as registrations carry it.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// One named listener of this node, resolved: where it binds, what it advertises, which protocol it speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Upper-case, as Kafka normalises listener names (`PLAINTEXT`, `CONTROLLER`, `INTERNAL`, ...).
    pub name: String,
    /// The address to bind. An empty host in the setting (`PLAINTEXT://:9092`) becomes `0.0.0.0`. Port 0 asks
    /// the OS for a free port (tests).
    pub bind: Endpoint,
    /// The endpoint given for this listener in `advertised.listeners`; `None` means "the bound address", see
    /// [`Listener::advertised_endpoint`].
    pub advertised: Option<Endpoint>,
    pub protocol: SecurityProtocol,
}

impl Listener {
    /// What other nodes and clients are told to connect to, once the socket is bound at `bound`: the advertised
    /// endpoint if one was configured, else the bound address, with a wildcard host replaced by 127.0.0.1 (not
    /// `localhost`, which librdkafka may resolve to ::1). Kafka would use the machine's canonical host name; the
    /// loopback address keeps zero configuration working on one machine without DNS.
    pub fn advertised_endpoint(&self, bound: SocketAddr) -> Endpoint {
        if let Some(a) = &self.advertised {
            return a.clone();
        }
        let host = if bound.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            bound.ip().to_string()
        };
        Endpoint::new(host, bound.port())
    }
}

/// One `NAME://host:port` entry before protocols and roles are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerEntry {
    pub name: String,
    pub endpoint: Endpoint,
}

/// Parses `host:port` (IPv6 in brackets: `[::1]:9093`). The host must not be empty.
pub fn parse_host_port(setting: &'static str, text: &str) -> Result<Endpoint, SettingError> {
    let (host, port) = split_bracketed(text).ok_or_else(|| {
        SettingError::new(
            setting,
            format!("'{text}' is not HOST:PORT (e.g. 127.0.0.1:9093, [::1]:9093)"),
        )
    })?;
    if host.is_empty() {
        return Err(SettingError::new(
            setting,
            format!("'{text}' has no host; write HOST:PORT, e.g. 127.0.0.1:9093"),
        ));
    }
    Ok(Endpoint::new(host, port))
}

/// Splits `host:port` or `[v6]:port`; the host may be empty (`:9092`).
fn split_bracketed(text: &str) -> Option<(String, u16)> {
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        (host, after.strip_prefix(':')?)
    } else {
        let (host, port) = text.rsplit_once(':')?;
        if host.contains(':') {
            return None; // An IPv6 address must be bracketed, or its port is ambiguous.
        }
        (host, port)
    };
    let port: u16 = port.parse().ok()?;
    Some((host.to_string(), port))
}

/// The non-empty, trimmed items of a comma-separated setting, bounded by [`LIST_ENTRIES_MAX`].
fn items<'a>(setting: &'static str, text: &'a str) -> Result<Vec<&'a str>, SettingError> {
    let items: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.len() > LIST_ENTRIES_MAX {
        return Err(SettingError::new(
            setting,
            format!(
                "{} entries; at most {LIST_ENTRIES_MAX} are accepted",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// Parses `listeners` / `advertised.listeners`: `NAME://host:port,...`. Names are upper-cased and must be
/// unique. An empty host stays empty here (the caller decides: bind to every interface, or refuse to advertise).
pub fn parse_listener_list(
    setting: &'static str,
    text: &str,
) -> Result<Vec<ListenerEntry>, SettingError> {
    let mut out: Vec<ListenerEntry> = Vec::new();
    for item in items(setting, text)? {
        let (name, addr) = item.split_once("://").ok_or_else(|| {
            SettingError::new(
                setting,
                format!("'{item}' is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093)"),
            )
        })?;
        let name = normalise_listener_name(setting, name)?;
        let (host, port) = split_bracketed(addr).ok_or_else(|| {
            SettingError::new(
                setting,
                format!("'{item}': '{addr}' is not HOST:PORT (e.g. {name}://127.0.0.1:9092)"),
            )
        })?;
        if out.iter().any(|l| l.name == name) {
            return Err(SettingError::new(
                setting,
                format!(
                    "listener name {name} appears twice in '{text}'; give each listener one name"
                ),
            ));
        }
        out.push(ListenerEntry {
            name,
            endpoint: Endpoint::new(host, port),
        });
    }
    Ok(out)
}

/// Listener names are Kafka identifiers; they are compared upper-cased (Kafka's `ListenerName.normalised`).
pub fn normalise_listener_name(setting: &'static str, name: &str) -> Result<String, SettingError> {
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(SettingError::new(
            setting,
            format!("'{name}' is not a listener name; use letters, digits, '_' or '-' (e.g. PLAINTEXT, CONTROLLER)"),
        ));
    }
    Ok(name.to_ascii_uppercase())
}

/// Parses a comma-separated list of listener names (`controller.listener.names`).
pub fn parse_name_list(setting: &'static str, text: &str) -> Result<Vec<String>, SettingError> {
    let mut out: Vec<String> = Vec::new();
    for item in items(setting, text)? {
        let name = normalise_listener_name(setting, item)?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Parses `controller.quorum.voters`: `id@host:port,...`. Ids and endpoints must each be unique: two voters with
/// one id, or two ids at one address, would let two processes believe they are the same voter (split brain).
pub fn parse_voters(text: &str) -> Result<BTreeMap<i32, Endpoint>, SettingError> {
    const SETTING: &str = "controller.quorum.voters";
    let mut voters: BTreeMap<i32, Endpoint> = BTreeMap::new();
    for item in items(SETTING, text)? {
        let (id, addr) = item.split_once('@').ok_or_else(|| {
            SettingError::new(
                SETTING,
                format!("'{item}' is not ID@HOST:PORT (e.g. 1@127.0.0.1:9093,2@127.0.0.1:9095)"),
            )
        })?;
        let id: i32 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| {
                SettingError::new(
                    SETTING,
                    format!("'{item}': '{id}' is not a node id (an integer >= 0)"),
                )
            })?;
        let endpoint = parse_host_port(SETTING, addr)?;
        if voters.contains_key(&id) {
            return Err(SettingError::new(
                SETTING,
                format!("node id {id} is listed twice; each voter needs its own node.id"),
            ));
        }
        if let Some((other, _)) = voters.iter().find(|(_, e)| **e == endpoint) {
            return Err(SettingError::new(
                SETTING,
                format!("voters {other} and {id} share the address {endpoint}; each voter needs its own HOST:PORT"),
            ));
        }
        voters.insert(id, endpoint);
    }
    Ok(voters)
}

/// Parses `controller.quorum.bootstrap.servers`: `host:port,...` (duplicates are dropped).
pub fn parse_servers(setting: &'static str, text: &str) -> Result<Vec<Endpoint>, SettingError> {
    let mut out: Vec<Endpoint> = Vec::new();
    for item in items(setting, text)? {
        let e = parse_host_port(setting, item)?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// Parses `listener.security.protocol.map`: `NAME:PROTOCOL,...`.
pub fn parse_protocol_map(text: &str) -> Result<BTreeMap<String, SecurityProtocol>, SettingError> {
    const SETTING: &str = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    for item in items(SETTING, text)? {
        let (name, protocol) = item.split_once(':').ok_or_else(|| {
            SettingError::new(
                SETTING,
                format!(
                    "'{item}' is not NAME:PROTOCOL (e.g. PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT)"
                ),
            )
        })?;
        let name = normalise_listener_name(SETTING, name)?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
            SettingError::new(
                SETTING,
                format!("'{item}': unknown security protocol '{}'; expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", protocol.trim()),
            )
        })?;
        if map.insert(name.clone(), protocol).is_some() {
            return Err(SettingError::new(
                SETTING,
                format!("listener {name} is mapped twice; give it one protocol"),
            ));
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            parse_host_port("x", "127.0.0.1:9093").unwrap(),
            Endpoint::new("127.0.0.1", 9093)
        );
        let v6 = parse_host_port("x", "[::1]:9093").unwrap();
        assert_eq!(v6, Endpoint::new("::1", 9093));
        assert_eq!(v6.to_string(), "[::1]:9093");
        assert!(parse_host_port("x", "::1:9093").is_err(), "unbracketed v6");
        assert!(parse_host_port("x", ":9093").is_err(), "no host");
        assert!(parse_host_port("x", "h:99999").is_err(), "port range");
        assert!(parse_host_port("x", "h").is_err());
    }

    #[test]
    fn listener_lists() {
        let l =
            parse_listener_list("listeners", "plaintext://:9092, CONTROLLER://[::1]:9093").unwrap();
        assert_eq!(l[0].name, "PLAINTEXT");
        assert_eq!(l[0].endpoint, Endpoint::new("", 9092));
        assert_eq!(l[1].endpoint, Endpoint::new("::1", 9093));
        let e = parse_listener_list("listeners", "127.0.0.1:9092").unwrap_err();
        assert_eq!(e.setting, "listeners");
        let e = parse_listener_list("listeners", "A://h:1,a://h:2").unwrap_err();
        assert!(e.problem.contains("appears twice"), "{e}");
        assert!(parse_listener_list("listeners", "A B://h:1").is_err());
    }

    #[test]
    fn voters_and_servers() {
        let v = parse_voters("1@a:9093, 2@[::1]:9093").unwrap();
        assert_eq!(v[&2], Endpoint::new("::1", 9093));
        assert!(parse_voters("").unwrap().is_empty());
        for bad in ["a:9093", "x@a:9093", "-1@a:9093", "1@a"] {
            let e = parse_voters(bad).unwrap_err();
            assert_eq!(e.setting, "controller.quorum.voters", "{bad}");
        }
        let s = parse_servers("controller.quorum.bootstrap.servers", "a:1,a:1,b:2").unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn protocol_map() {
        let m = parse_protocol_map("controller:plaintext,SSL:SSL").unwrap();
        assert_eq!(m["CONTROLLER"], SecurityProtocol::Plaintext);
        assert_eq!(m["SSL"], SecurityProtocol::Ssl);
        assert!(parse_protocol_map("A:TLS")
            .unwrap_err()
            .problem
            .contains("unknown security protocol"));
        assert!(parse_protocol_map("A").is_err());
        assert!(parse_protocol_map("A:SSL,a:PLAINTEXT").is_err());
    }

    #[test]
    fn advertised_endpoint_falls_back_to_bound_address() {
        let l = Listener {
            name: "PLAINTEXT".into(),
            bind: Endpoint::new("0.0.0.0", 0),
            advertised: None,
            protocol: SecurityProtocol::Plaintext,
        };
        let bound: SocketAddr = "0.0.0.0:4321".parse().unwrap();
        assert_eq!(
            l.advertised_endpoint(bound),
            Endpoint::new("127.0.0.1", 4321)
        );
        let l = Listener {
            advertised: Some(Endpoint::new("broker1", 9092)),
            ..l
        };
        assert_eq!(l.advertised_endpoint(bound), Endpoint::new("broker1", 9092));
    }
}
