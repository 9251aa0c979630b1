//! Kafka's security settings, resolved per listener: `ssl.*` and `sasl.*` with their `listener.name.<name>.`
//! overrides (Kafka's rule: the listener-prefixed setting wins over the unprefixed one), and the JAAS text of
//! `listener.name.<name>.<mechanism>.sasl.jaas.config`.
//!
//! Only the settings are read here; files (PEM keystores and truststores) are loaded when the listener is built
//! (`crate::security::tls`), so a start-up error can name both the setting and the file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::effective;
use super::endpoints::{Listener, SecurityProtocol, SettingError};

/// A SASL mechanism Annal's broker serves (the type is shared with the client crate, which logs in with it).
pub use annal_client::SaslMechanism;

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// Where PEM text comes from: a file (`*.location`) or the setting's own value (inline PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File { setting: String, path: PathBuf },
    Inline { setting: String, pem: String },
}

/// A listener's TLS settings (SSL and SASL_SSL listeners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslSettings {
    /// The certificate chain: `ssl.keystore.location` (key and chain in one PEM file) or
    /// `ssl.keystore.certificate.chain`.
    pub chain: PemSource,
    /// The private key: the same file, or `ssl.keystore.key`.
    pub key: PemSource,
    /// `ssl.truststore.location` or `ssl.truststore.certificates`: the CAs client certificates must chain to.
    pub truststore: Option<PemSource>,
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols`: some of TLSv1.2, TLSv1.3.
    pub tls12: bool,
    pub tls13: bool,
}

/// A listener's SASL settings (SASL_PLAINTEXT and SASL_SSL listeners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order given.
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users (`user_NAME="password"` in the listener's PLAIN JAAS config).
    pub plain_users: BTreeMap<String, String>,
}

/// One listener's security, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSecurity {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub ssl: Option<SslSettings>,
    pub sasl: Option<SaslSettings>,
}

/// Security across the node: every broker listener's settings and the shared limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityConfig {
    /// By listener name (upper case).
    pub listeners: BTreeMap<String, ListenerSecurity>,
    /// `connection.failed.authentication.delay.ms` (100): a failed authentication's connection is closed this
    /// long after the failure is answered, so a password guesser cannot retry at full speed.
    pub failed_authentication_delay_ms: u64,
    /// `sasl.server.max.receive.size` (524288): the largest frame accepted before authentication completes.
    pub sasl_max_receive_size: usize,
    /// `authorizer.class.name` set to Kafka's StandardAuthorizer, with `super.users` and
    /// `allow.everyone.if.no.acl.found`; `None` (Kafka's default, no authorizer) allows everything.
    pub authorizer: Option<crate::security::authorizer::AuthorizerConfig>,
    /// How this broker logs in on the other brokers' inter-broker listener when that listener speaks SASL
    /// ([`inter_broker_sasl`]); `None` on a PLAINTEXT or SSL inter-broker listener.
    pub inter_broker_sasl: Option<InterBrokerSasl>,
    /// The controller listener's TLS (`listener.name.<controller>.ssl.*`, then `ssl.*`) when it speaks SSL: the
    /// server side on a controller, and the client side of the quorum's transport and of the brokers'
    /// controller channel on every node. `None` on a PLAINTEXT controller listener.
    pub controller_ssl: Option<SslSettings>,
}

/// The credentials of this broker's own SASL logins on the inter-broker listener. `Debug` leaves the password
/// out.
#[derive(Clone, PartialEq, Eq)]
pub struct InterBrokerSasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for InterBrokerSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerSasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The login of this broker on the inter-broker listener `inter_broker` when it speaks SASL, as Kafka takes it:
/// the mechanism is `sasl.mechanism.inter.broker.protocol` (Kafka's default GSSAPI is not supported), which the
/// listener must enable, and the username and password are the `username` and `password` options of that
/// listener's JAAS config for the mechanism (`listener.name.<l>.<mechanism>.sasl.jaas.config`, the entry that also
/// lists PLAIN's users). With SCRAM the user must exist in the metadata log before the brokers replicate.
pub fn inter_broker_sasl(
    explicit: &BTreeMap<String, String>,
    security: &SecurityConfig,
    inter_broker: &str,
) -> Result<Option<InterBrokerSasl>, SettingError> {
    let Some(sasl) = security
        .listeners
        .get(inter_broker)
        .and_then(|l| l.sasl.as_ref())
    else {
        return Ok(None);
    };
    const SETTING: &str = "sasl.mechanism.inter.broker.protocol";
    let name = effective(explicit, SETTING).unwrap_or_else(|| "GSSAPI".into());
    let Some(mechanism) = SaslMechanism::parse(name.trim()) else {
        return Err(SettingError::new(
            SETTING,
            format!(
                "the inter-broker listener {inter_broker} speaks SASL, and Annal's brokers log in with PLAIN, \
                 SCRAM-SHA-256 or SCRAM-SHA-512, not {name} (Kafka's default is GSSAPI): set {SETTING}"
            ),
        ));
    };
    if !sasl.mechanisms.contains(&mechanism) {
        return Err(SettingError::new(
            SETTING,
            format!(
                "{} is not enabled on the inter-broker listener {inter_broker} (it enables {}); add it to \
                 listener.name.{}.sasl.enabled.mechanisms",
                mechanism.name(),
                sasl.mechanisms.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
                inter_broker.to_ascii_lowercase()
            ),
        ));
    }
    let setting = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        inter_broker.to_ascii_lowercase(),
        mechanism.name().to_ascii_lowercase()
    );
    let missing = || {
        SettingError::new(
            leak(setting.clone()),
            format!(
                "the brokers log in on the inter-broker listener {inter_broker} with {}: give this JAAS config the \
                 broker's own username=\"...\" password=\"...\"",
                mechanism.name()
            ),
        )
    };
    let text = explicit.get(&setting).ok_or_else(missing)?;
    let jaas = parse_jaas(text).map_err(|e| SettingError::new(leak(setting.clone()), e))?;
    let option = |k: &str| {
        jaas.options
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    match (option("username"), option("password")) {
        (Some(username), Some(password)) => Ok(Some(InterBrokerSasl {
            mechanism,
            username,
            password,
        })),
        _ => Err(missing()),
    }
}

/// Settings that hold secrets: never echoed by DescribeConfigs.
pub fn is_sensitive(name: &str) -> bool {
    name.ends_with(".password")
        || name.ends_with("ssl.keystore.key")
        || name.ends_with("sasl.jaas.config")
}

/// The `ssl.*` settings a listener may override, and whose unprefixed form is a broker setting.
pub const LISTENER_SSL_SETTINGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms",
];

/// Checks a `listener.name.<name>.<rest>` key: `<rest>` must be one of [`LISTENER_SSL_SETTINGS`] or
/// `<mechanism>.sasl.jaas.config`. Returns the unprefixed setting whose kind validates the value, or `None` for a
/// JAAS config (free text).
pub fn listener_setting(key: &str) -> Result<Option<&'static str>, String> {
    let rest = key
        .strip_prefix("listener.name.")
        .ok_or_else(|| format!("'{key}' is not a listener.name.<listener>. setting"))?;
    let (listener, setting) = rest
        .split_once('.')
        .ok_or_else(|| format!("'{key}' names no setting after the listener name"))?;
    if listener.is_empty() {
        return Err(format!("'{key}' has an empty listener name"));
    }
    if let Some(s) = LISTENER_SSL_SETTINGS.iter().find(|s| **s == setting) {
        return Ok(Some(s));
    }
    if let Some(mechanism) = setting.strip_suffix(".sasl.jaas.config") {
        if SaslMechanism::parse(&mechanism.to_ascii_uppercase()).is_some() {
            return Ok(None);
        }
        return Err(format!(
            "'{key}': SASL mechanism '{mechanism}' is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 are)"
        ));
    }
    Err(format!(
        "'{key}': {setting} cannot be set per listener in Annal (listener overrides: {}, <mechanism>.sasl.jaas.config)",
        LISTENER_SSL_SETTINGS.join(", ")
    ))
}

/// A listener's view of the settings: `listener.name.<name>.<key>` first, then `<key>`, then the default.
struct ListenerView<'a> {
    explicit: &'a BTreeMap<String, String>,
    prefix: String,
}

impl ListenerView<'_> {
    /// The value and the name of the setting it came from (for error messages).
    fn get(&self, key: &str) -> Option<(String, String)> {
        let prefixed = format!("{}{key}", self.prefix);
        if let Some(v) = self.explicit.get(&prefixed) {
            return Some((v.clone(), prefixed));
        }
        effective(self.explicit, key).map(|v| (v, key.to_string()))
    }

    fn set(&self, key: &str) -> Option<(String, String)> {
        self.get(key).filter(|(v, _)| !v.trim().is_empty())
    }
}

/// Resolves the security of every broker listener. Bad combinations name the setting to fix.
/// `controller` is the listener the node reaches the controllers on (the first of `controller.listener.names`)
/// and its protocol: only its `ssl.*` settings are read (SASL is refused on it by the cluster settings).
pub fn resolve(
    explicit: &BTreeMap<String, String>,
    broker_listeners: &[Listener],
    controller: Option<(&str, SecurityProtocol)>,
) -> Result<SecurityConfig, SettingError> {
    for key in explicit.keys() {
        if let Some(rest) = key.strip_prefix("listener.name.") {
            let listener = rest.split('.').next().unwrap_or_default();
            if !broker_listeners
                .iter()
                .any(|l| l.name.eq_ignore_ascii_case(listener))
                && !controller.is_some_and(|(name, _)| name.eq_ignore_ascii_case(listener))
            {
                return Err(SettingError::new(
                    "listeners",
                    format!(
                        "{key} configures listener '{listener}', which is not one of this node's broker listeners \
                         ({}); fix the listener name or add the listener to listeners",
                        broker_listeners.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
    }
    let mut listeners = BTreeMap::new();
    for l in broker_listeners {
        let view = ListenerView {
            explicit,
            prefix: format!("listener.name.{}.", l.name.to_ascii_lowercase()),
        };
        let (tls, sasl) = match l.protocol {
            SecurityProtocol::Plaintext => (false, false),
            SecurityProtocol::Ssl => (true, false),
            SecurityProtocol::SaslPlaintext => (false, true),
            SecurityProtocol::SaslSsl => (true, true),
        };
        let ssl = if tls {
            Some(ssl_settings(&view, &l.name)?)
        } else {
            None
        };
        let sasl = if sasl {
            Some(sasl_settings(&view, &l.name)?)
        } else {
            None
        };
        listeners.insert(
            l.name.clone(),
            ListenerSecurity {
                name: l.name.clone(),
                protocol: l.protocol,
                ssl,
                sasl,
            },
        );
    }
    let num = |name: &str| -> i64 {
        effective(explicit, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let controller_ssl = match controller {
        Some((name, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)) => {
            let view = ListenerView {
                explicit,
                prefix: format!("listener.name.{}.", name.to_ascii_lowercase()),
            };
            Some(ssl_settings(&view, name)?)
        }
        _ => None,
    };
    let authorizer = authorizer_settings(explicit)?;
    Ok(SecurityConfig {
        authorizer,
        inter_broker_sasl: None,
        controller_ssl,
        listeners,
        failed_authentication_delay_ms: num("connection.failed.authentication.delay.ms").max(0)
            as u64,
        sasl_max_receive_size: num("sasl.server.max.receive.size").max(1) as usize,
    })
}

fn leak(s: String) -> &'static str {
    // Setting names in errors are `&'static str`; start-up errors are made once per process.
    Box::leak(s.into_boxed_str())
}

fn ssl_settings(view: &ListenerView, listener: &str) -> Result<SslSettings, SettingError> {
    for (setting, what) in [
        ("ssl.keystore.type", "keystore"),
        ("ssl.truststore.type", "truststore"),
    ] {
        let (kind, from) = view.get(setting).unwrap_or(("JKS".into(), setting.into()));
        if !kind.eq_ignore_ascii_case("PEM") {
            return Err(SettingError::new(
                leak(from),
                format!(
                    "listener {listener} speaks TLS with a {kind} {what}; Annal reads PEM only: set \
                     {setting}=PEM (per listener: listener.name.{}.{setting}) and give PEM files",
                    listener.to_ascii_lowercase()
                ),
            ));
        }
    }
    for setting in ["ssl.keystore.password", "ssl.key.password"] {
        if let Some((_, from)) = view.set(setting) {
            return Err(SettingError::new(
                leak(from),
                "encrypted private keys are not supported yet; give an unencrypted PEM key (PKCS#8, PKCS#1 or \
                 SEC1) and remove this setting",
            ));
        }
    }
    let location = view.set("ssl.keystore.location");
    let chain = view.set("ssl.keystore.certificate.chain");
    let key = view.set("ssl.keystore.key");
    let (chain, key) = match (location, chain, key) {
        (Some((path, setting)), None, None) => (
            PemSource::File {
                setting: setting.clone(),
                path: PathBuf::from(path.trim()),
            },
            PemSource::File {
                setting,
                path: PathBuf::from(path.trim()),
            },
        ),
        (None, Some((chain, cs)), Some((key, ks))) => (
            PemSource::Inline {
                setting: cs,
                pem: chain,
            },
            PemSource::Inline {
                setting: ks,
                pem: key,
            },
        ),
        (None, None, None) => {
            return Err(SettingError::new(
                "ssl.keystore.location",
                format!(
                    "listener {listener} speaks TLS but has no certificate: set ssl.keystore.location to a PEM \
                     file with the private key and certificate chain, or ssl.keystore.certificate.chain and \
                     ssl.keystore.key"
                ),
            ))
        }
        (Some((_, s)), _, _) => {
            return Err(SettingError::new(
                leak(s),
                "is set together with ssl.keystore.certificate.chain/ssl.keystore.key; use one or the other",
            ))
        }
        (None, _, _) => {
            return Err(SettingError::new(
                "ssl.keystore.certificate.chain",
                "ssl.keystore.certificate.chain and ssl.keystore.key go together; set both",
            ))
        }
    };
    let truststore = match (
        view.set("ssl.truststore.location"),
        view.set("ssl.truststore.certificates"),
    ) {
        (Some((path, setting)), None) => Some(PemSource::File {
            setting,
            path: PathBuf::from(path.trim()),
        }),
        (None, Some((pem, setting))) => Some(PemSource::Inline { setting, pem }),
        (None, None) => None,
        (Some(_), Some((_, s))) => {
            return Err(SettingError::new(
                leak(s),
                "is set together with ssl.truststore.location; use one or the other",
            ))
        }
    };
    let (auth, auth_from) = view
        .get("ssl.client.auth")
        .unwrap_or(("none".into(), "ssl.client.auth".into()));
    let client_auth = match auth.trim().to_ascii_lowercase().as_str() {
        "none" => ClientAuth::None,
        "requested" => ClientAuth::Requested,
        "required" => ClientAuth::Required,
        other => {
            return Err(SettingError::new(
                leak(auth_from),
                format!("'{other}' is not none, requested or required"),
            ))
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(SettingError::new(
            leak(auth_from),
            format!(
                "listener {listener} asks for client certificates (ssl.client.auth={auth}) but has no truststore to \
                 check them: set ssl.truststore.location (PEM CA certificates) or ssl.truststore.certificates"
            ),
        ));
    }
    let (protocols, from) = view
        .get("ssl.enabled.protocols")
        .unwrap_or(("TLSv1.2,TLSv1.3".into(), "ssl.enabled.protocols".into()));
    let (mut tls12, mut tls13) = (false, false);
    for p in protocols
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match p {
            "TLSv1.2" => tls12 = true,
            "TLSv1.3" => tls13 = true,
            other => {
                return Err(SettingError::new(
                    leak(from),
                    format!("'{other}' is not supported; use TLSv1.2 and/or TLSv1.3"),
                ))
            }
        }
    }
    if !(tls12 || tls13) {
        return Err(SettingError::new(
            leak(from),
            "enables no protocol; use TLSv1.2,TLSv1.3",
        ));
    }
    Ok(SslSettings {
        chain,
        key,
        truststore,
        client_auth,
        tls12,
        tls13,
    })
}

fn sasl_settings(view: &ListenerView, listener: &str) -> Result<SaslSettings, SettingError> {
    let (names, from) = view
        .get("sasl.enabled.mechanisms")
        .unwrap_or(("GSSAPI".into(), "sasl.enabled.mechanisms".into()));
    let mut mechanisms = Vec::new();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match SaslMechanism::parse(name) {
            Some(m) if !mechanisms.contains(&m) => mechanisms.push(m),
            Some(_) => {}
            None => {
                return Err(SettingError::new(
                    leak(from),
                    format!(
                        "listener {listener}: SASL mechanism {name} is not supported (Kafka's default is GSSAPI); \
                         set sasl.enabled.mechanisms to some of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
                    ),
                ))
            }
        }
    }
    if mechanisms.is_empty() {
        return Err(SettingError::new(
            leak(from),
            format!("listener {listener} speaks SASL but enables no mechanism; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
        ));
    }
    let mut plain_users = BTreeMap::new();
    if mechanisms.contains(&SaslMechanism::Plain) {
        let setting = format!("{}plain.sasl.jaas.config", view.prefix);
        let text = view.explicit.get(&setting).ok_or_else(|| {
            SettingError::new(
                leak(setting.clone()),
                format!(
                    "listener {listener} enables PLAIN but has no users: set {setting}=\
                     org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";"
                ),
            )
        })?;
        let jaas = parse_jaas(text).map_err(|e| SettingError::new(leak(setting.clone()), e))?;
        if jaas.login_module != "org.apache.kafka.common.security.plain.PlainLoginModule" {
            return Err(SettingError::new(
                leak(setting),
                format!(
                    "names login module {}; PLAIN uses org.apache.kafka.common.security.plain.PlainLoginModule",
                    jaas.login_module
                ),
            ));
        }
        for (k, v) in &jaas.options {
            if let Some(user) = k.strip_prefix("user_") {
                plain_users.insert(user.to_string(), v.clone());
            }
        }
    }
    Ok(SaslSettings {
        mechanisms,
        plain_users,
    })
}

/// One JAAS login module entry, as Kafka's `sasl.jaas.config` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasEntry {
    pub login_module: String,
    /// `required`, `requisite`, `sufficient` or `optional`.
    pub flag: String,
    pub options: Vec<(String, String)>,
}

/// Parses `<LoginModule> <flag> key=value key="quoted value" ... ;` (Kafka's `JaasConfig`: exactly one entry;
/// values quoted with `"` may hold spaces and `\"`). Errors say where the text stops making sense.
pub fn parse_jaas(text: &str) -> Result<JaasEntry, String> {
    let mut chars = text.trim().chars().peekable();
    let token = |chars: &mut std::iter::Peekable<std::str::Chars>| -> String {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut t = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == '=' || c == ';' {
                break;
            }
            t.push(c);
            chars.next();
        }
        t
    };
    let login_module = token(&mut chars);
    let flag = token(&mut chars);
    if login_module.is_empty() || flag.is_empty() {
        return Err("expected '<LoginModule class> required key=\"value\" ...;'".into());
    }
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!(
            "'{flag}' is not a login module flag (required, requisite, sufficient, optional)"
        ));
    }
    let mut options = Vec::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None => return Err("the JAAS entry does not end with ';'".into()),
            Some(';') => {
                chars.next();
                break;
            }
            _ => {}
        }
        let key = token(&mut chars);
        if key.is_empty() || chars.next() != Some('=') {
            return Err(format!(
                "expected key=value after '{}'",
                options
                    .last()
                    .map(|(k, _): &(String, String)| k.as_str())
                    .unwrap_or(&flag)
            ));
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut v = String::new();
            loop {
                match chars.next() {
                    None => return Err(format!("the value of {key} has no closing quote")),
                    Some('\\') => match chars.next() {
                        Some(c) => v.push(c),
                        None => return Err(format!("the value of {key} ends with a backslash")),
                    },
                    Some('"') => break,
                    Some(c) => v.push(c),
                }
            }
            v
        } else {
            token(&mut chars)
        };
        options.push((key, value));
    }
    if chars.any(|c| !c.is_whitespace()) {
        return Err(
            "text after the entry's ';' (Kafka's sasl.jaas.config holds one login module)".into(),
        );
    }
    Ok(JaasEntry {
        login_module,
        flag,
        options,
    })
}

/// `authorizer.class.name`: empty (no authorizer) or Kafka's StandardAuthorizer; `super.users` is Kafka's
/// semicolon-separated list of principals (`User:admin;User:ANONYMOUS`).
fn authorizer_settings(
    explicit: &BTreeMap<String, String>,
) -> Result<Option<crate::security::authorizer::AuthorizerConfig>, SettingError> {
    use crate::security::authorizer::{AuthorizerConfig, STANDARD_AUTHORIZER};
    let class = effective(explicit, "authorizer.class.name").unwrap_or_default();
    let class = class.trim();
    if class.is_empty() {
        return Ok(None);
    }
    if class != STANDARD_AUTHORIZER && class != "kafka.security.authorizer.AclAuthorizer" {
        return Err(SettingError::new(
            "authorizer.class.name",
            format!(
                "'{class}' is not an authorizer Annal has; use {STANDARD_AUTHORIZER} (Kafka's KRaft authorizer, \
                 ACLs in the metadata log) or leave it empty for no authorization"
            ),
        ));
    }
    if class != STANDARD_AUTHORIZER {
        return Err(SettingError::new(
            "authorizer.class.name",
            format!(
                "{class} is ZooKeeper's authorizer; a KRaft cluster uses {STANDARD_AUTHORIZER}"
            ),
        ));
    }
    let mut super_users = std::collections::BTreeSet::new();
    for p in effective(explicit, "super.users")
        .unwrap_or_default()
        .split(';')
    {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        if !p
            .split_once(':')
            .is_some_and(|(t, n)| !t.is_empty() && !n.is_empty())
        {
            return Err(SettingError::new(
                "super.users",
                format!("'{p}' is not a principal; write TYPE:NAME entries separated by ';', e.g. User:admin;User:ANONYMOUS"),
            ));
        }
        super_users.insert(p.to_string());
    }
    let allow_everyone = effective(explicit, "allow.everyone.if.no.acl.found")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    Ok(Some(AuthorizerConfig {
        super_users,
        allow_everyone_if_no_acl_found: allow_everyone,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_as_kafka_users_write_it() {
        let e = parse_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a \"q\" b";"#,
        )
        .unwrap();
        assert_eq!(
            e.login_module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(e.flag, "required");
        assert_eq!(e.options[0], ("username".into(), "admin".into()));
        assert_eq!(e.options[3], ("user_alice".into(), "a \"q\" b".into()));
    }

    #[test]
    fn bad_jaas_says_what_is_wrong() {
        for (text, want) in [
            ("X required a=\"b\"", "does not end with ';'"),
            ("X maybe;", "not a login module flag"),
            ("X required a=\"b;", "no closing quote"),
            ("X required a;", "expected key=value"),
            ("X required; Y required;", "text after"),
        ] {
            let e = parse_jaas(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn listener_overrides_are_checked() {
        assert_eq!(
            listener_setting("listener.name.ext.ssl.keystore.location"),
            Ok(Some("ssl.keystore.location"))
        );
        assert_eq!(
            listener_setting("listener.name.ext.scram-sha-512.sasl.jaas.config"),
            Ok(None)
        );
        assert!(listener_setting("listener.name.ext.gssapi.sasl.jaas.config").is_err());
        assert!(listener_setting("listener.name.ext.num.partitions").is_err());
    }
}
