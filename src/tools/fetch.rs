//! `fetch`: HTTP for scripts, served by the host under its rules.
//!
//! Scripts never open sockets; a host that wants them to reach the web adds this
//! tool with a [`FetchPolicy`]. Every request, and every redirect it is sent on to,
//! must name an allowed host; its name is resolved here and the request is sent to
//! the address that was checked (so a second lookup cannot answer differently), and
//! an address that is loopback, private, link-local or otherwise not on the public
//! internet is refused unless the policy allows its network explicitly. Headers the
//! host configures for a host (a token) are attached on the way out, never shown to
//! the script, and blanked wherever they come back in a response. Each response is
//! capped in bytes and time, and the tool allows a fixed number of requests over
//! its life.
//!
//! As a tool, each request is a tool call: an event, a transcript line (URL,
//! method, status, size in the result), and on resume the recorded response is
//! replayed instead of fetching again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use codeact_runtime::ToolError;
use futures_util::StreamExt;
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use crate::tools::toolbox::Tool;

/// The tool's name in every runtime.
pub const FETCH_TOOL: &str = "fetch";

/// Bytes of one response body the tool accepts. Default: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;
/// Time one request may take, redirects included. Default: 10 s.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests the tool serves over its life. Default: 20.
pub const DEFAULT_MAX_REQUESTS: usize = 20;
/// Redirects followed per request. Default: 5.
const MAX_REDIRECTS: usize = 5;

/// A host name pattern: an exact name (`api.example.com`), or every name below a
/// domain (`*.example.com`, which does not match `example.com` itself). Matched
/// without regard to case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern(String);

impl HostPattern {
    /// Parses `pattern`; an empty one, or a `*` anywhere but a leading `*.`, is
    /// refused.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        let lower = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
        let rest = lower.strip_prefix("*.").unwrap_or(&lower);
        if rest.is_empty() || rest.contains('*') || rest.contains('/') || rest.contains(' ') {
            return Err(format!(
                "'{pattern}' is not a host name or a pattern such as *.example.com"
            ));
        }
        Ok(Self(lower))
    }

    fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self.0.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => host == self.0,
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An IP network (`127.0.0.1/32`, `10.0.0.0/8`, `fd00::/8`; a bare address is the
/// network of that one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    address: IpAddr,
    prefix: u8,
}

impl IpNetwork {
    /// Parses `ADDRESS[/PREFIX]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("'{text}' is not an IP address or network"))?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("'{text}': the prefix must be 0 to {bits}"))?,
            None => bits,
        };
        Ok(Self { address, prefix })
    }

    fn contains(&self, address: IpAddr) -> bool {
        let prefix = u32::from(self.prefix);
        match (self.address, canonical(address)) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
                u32::from(network) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                u128::from(network) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

/// A header the host attaches to requests for matching hosts.
#[derive(Clone)]
pub struct SecretHeader {
    host: HostPattern,
    name: HeaderName,
    value: HeaderValue,
}

impl std::fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretHeader")
            .field("host", &self.host)
            .field("name", &self.name)
            .field("value", &"[redacted]")
            .finish()
    }
}

impl SecretHeader {
    /// A header for every request to a host matching `host`.
    pub fn new(host: HostPattern, name: &str, value: &str) -> Result<Self, String> {
        Ok(Self {
            host,
            name: HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("'{name}' is not a header name"))?,
            value: HeaderValue::from_str(value.trim())
                .map_err(|_| format!("the value of header '{name}' is not a valid header value"))?,
        })
    }

    /// Parses `HOST: NAME: VALUE`, where `$VAR` or `${VAR}` in the value is read
    /// from the environment (so the secret stays out of the command line).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.splitn(3, ':');
        let (Some(host), Some(name), Some(value)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "'{text}' must be HOST: NAME: VALUE (e.g. 'api.example.com: Authorization: Bearer $TOKEN')"
            ));
        };
        let value = expand_environment(value)?;
        Self::new(HostPattern::parse(host)?, name, &value)
    }
}

/// Replaces `$VAR` and `${VAR}` with the variable's value; a variable that is not
/// set is an error, so a request never goes out with an empty token.
pub(crate) fn expand_environment(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(braced) => match braced.split_once('}') {
                Some((name, tail)) => (name, tail),
                None => return Err(format!("unclosed ${{ in '{text}'")),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if name.is_empty() {
            out.push('$');
        } else {
            let value = std::env::var(name)
                .map_err(|_| format!("the environment variable {name} is not set"))?;
            out.push_str(&value);
        }
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// What the `fetch` tool may do. Nothing is allowed until hosts are added.
#[derive(Debug, Clone)]
pub struct FetchPolicy {
    hosts: Vec<HostPattern>,
    private_networks: Vec<IpNetwork>,
    headers: Vec<SecretHeader>,
    max_response_bytes: usize,
    timeout: Duration,
    max_requests: usize,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            hosts: Vec::new(),
            private_networks: Vec::new(),
            headers: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            timeout: DEFAULT_FETCH_TIMEOUT,
            max_requests: DEFAULT_MAX_REQUESTS,
        }
    }
}

impl FetchPolicy {
    /// A policy that allows nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows requests to hosts matching `pattern`.
    pub fn allow_host(mut self, pattern: HostPattern) -> Self {
        self.hosts.push(pattern);
        self
    }

    /// Allows addresses in `network` although they are not public (loopback,
    /// private, link-local…): a local test server, a service on the LAN.
    pub fn allow_private_network(mut self, network: IpNetwork) -> Self {
        self.private_networks.push(network);
        self
    }

    /// Attaches `header` to requests for its hosts.
    pub fn header(mut self, header: SecretHeader) -> Self {
        self.headers.push(header);
        self
    }

    /// Caps a response body at `bytes` (default [`DEFAULT_MAX_RESPONSE_BYTES`]).
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Bounds one request, redirects included (default [`DEFAULT_FETCH_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The requests the tool serves over its life (default
    /// [`DEFAULT_MAX_REQUESTS`]); build one tool per run for a per-run budget.
    pub fn max_requests(mut self, requests: usize) -> Self {
        self.max_requests = requests;
        self
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|pattern| pattern.matches(host))
    }

    fn address_allowed(&self, address: IpAddr) -> bool {
        is_public(address)
            || self
                .private_networks
                .iter()
                .any(|network| network.contains(address))
    }
}

/// The `fetch` tool under `policy`: arguments `{url, method, headers, body}` (all
/// but `url` optional; `body` a string, or any other JSON value sent as JSON);
/// result `{status, headers, text, json}` (`json` when the body parses as JSON).
pub fn fetch_tool(policy: FetchPolicy) -> Tool {
    let policy = Arc::new(policy);
    let served = Arc::new(AtomicUsize::new(0));
    let hosts: Vec<String> = policy.hosts.iter().map(ToString::to_string).collect();
    let description = format!(
        "Sends an HTTP request and returns {{status, headers, text, json}} (json when the body is JSON). \
         Only these hosts are reachable: {}.",
        hosts.join(", ")
    );
    Tool::new(FETCH_TOOL, description, move |args| {
        let policy = policy.clone();
        let served = served.clone();
        async move {
            if served.fetch_add(1, Ordering::Relaxed) >= policy.max_requests {
                return Err(ToolError::new(format!(
                    "fetch: the budget of {} requests is spent",
                    policy.max_requests
                )));
            }
            let request = Request::from_args(&args)?;
            match tokio::time::timeout(policy.timeout, send(&policy, request)).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::new(format!(
                    "fetch: no complete response within {} ms",
                    policy.timeout.as_millis()
                ))),
            }
        }
    })
    .with_parameters(json!({
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "http or https URL"},
            "method": {"type": "string", "description": "GET (default), POST, PUT, PATCH, DELETE or HEAD"},
            "headers": {"type": "object", "description": "request headers, name to value"},
            "body": {"description": "a string, or a JSON value sent as JSON"}
        },
        "required": ["url"]
    }))
}

/// One request as the script asked for it.
struct Request {
    url: Url,
    method: reqwest::Method,
    headers: HeaderMap,
    body: Option<(Vec<u8>, Option<&'static str>)>,
}

impl Request {
    fn from_args(args: &Value) -> Result<Self, ToolError> {
        let refuse = |why: String| ToolError::new(format!("fetch: {why}"));
        let url = match args {
            Value::String(url) => url.as_str(),
            _ => args["url"]
                .as_str()
                .ok_or_else(|| refuse("`url` (a string) is required".into()))?,
        };
        let url = Url::parse(url).map_err(|e| refuse(format!("'{url}' is not a URL ({e})")))?;
        let method = match args["method"]
            .as_str()
            .unwrap_or("GET")
            .to_ascii_uppercase()
            .as_str()
        {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            "PUT" => reqwest::Method::PUT,
            "PATCH" => reqwest::Method::PATCH,
            "DELETE" => reqwest::Method::DELETE,
            "HEAD" => reqwest::Method::HEAD,
            other => {
                return Err(refuse(format!(
                    "method '{other}' is not one of GET, POST, PUT, PATCH, DELETE, HEAD"
                )));
            }
        };
        let mut headers = HeaderMap::new();
        if let Some(given) = args["headers"].as_object() {
            for (name, value) in given {
                let value = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| refuse(format!("'{name}' is not a header name")))?;
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| refuse(format!("the value of '{name}' is not a header value")))?;
                headers.insert(name, value);
            }
        }
        let body = match &args["body"] {
            Value::Null => None,
            Value::String(text) => Some((text.clone().into_bytes(), None)),
            other => Some((other.to_string().into_bytes(), Some("application/json"))),
        };
        Ok(Self {
            url,
            method,
            headers,
            body,
        })
    }
}

/// Sends `request`, following redirects that stay within the policy.
async fn send(policy: &FetchPolicy, mut request: Request) -> Result<Value, ToolError> {
    for _ in 0..=MAX_REDIRECTS {
        let (host, address) = checked_destination(policy, &request.url).await?;
        let response = send_once(policy, &request, &host, address).await?;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(reqwest::header::LOCATION)
        {
            let location = location.to_str().unwrap_or_default();
            let next = request.url.join(location).map_err(|e| {
                ToolError::new(format!(
                    "fetch: a redirect to '{location}' is not a URL ({e})"
                ))
            })?;
            // 303, and 301/302 after a POST, continue as a GET without a body.
            if status == reqwest::StatusCode::SEE_OTHER
                || (matches!(status.as_u16(), 301 | 302) && request.method == reqwest::Method::POST)
            {
                request.method = reqwest::Method::GET;
                request.body = None;
            }
            request.url = next;
            continue;
        }
        return read_response(policy, response).await;
    }
    Err(ToolError::new(format!(
        "fetch: more than {MAX_REDIRECTS} redirects"
    )))
}

/// The URL's host, if allowed, and the address it resolves to, if allowed.
async fn checked_destination(
    policy: &FetchPolicy,
    url: &Url,
) -> Result<(String, SocketAddr), ToolError> {
    let refuse = |why: String| ToolError::new(format!("fetch: {why}"));
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(format!("'{url}' is not an http or https URL")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("a URL may not carry a user name or password".into()));
    }
    let host = url
        .host_str()
        .ok_or_else(|| refuse(format!("'{url}' names no host")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if !policy.host_allowed(&host) {
        return Err(refuse(format!(
            "{host} is not among the allowed hosts ({})",
            policy
                .hosts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| refuse(format!("cannot resolve {host}: {e}")))?
        .collect();
    // Every address the name has must be allowed: a name that also resolves
    // inward is refused rather than raced.
    if let Some(inward) = addresses.iter().find(|a| !policy.address_allowed(a.ip())) {
        return Err(refuse(format!(
            "{host} resolves to {}, which is not a public address; a host allows it with --allow-private-network {}",
            inward.ip(),
            inward.ip()
        )));
    }
    let address = addresses
        .first()
        .copied()
        .ok_or_else(|| refuse(format!("{host} has no address")))?;
    Ok((host, address))
}

/// One hop, sent to `address` only (the client resolves `host` to it and to
/// nothing else; redirects are not followed by the client).
async fn send_once(
    policy: &FetchPolicy,
    request: &Request,
    host: &str,
    address: SocketAddr,
) -> Result<reqwest::Response, ToolError> {
    let client = reqwest::Client::builder()
        .user_agent(concat!("codeact-fetch/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .resolve(host, address)
        .connect_timeout(policy.timeout)
        .build()
        .map_err(|e| ToolError::new(format!("fetch: cannot build an HTTP client: {e}")))?;
    let mut headers = request.headers.clone();
    for secret in policy.headers.iter().filter(|h| h.host.matches(host)) {
        headers.insert(secret.name.clone(), secret.value.clone());
    }
    let mut builder = client
        .request(request.method.clone(), request.url.clone())
        .headers(headers);
    if let Some((body, content_type)) = &request.body {
        if let Some(content_type) = content_type
            && !request.headers.contains_key(reqwest::header::CONTENT_TYPE)
        {
            builder = builder.header(reqwest::header::CONTENT_TYPE, *content_type);
        }
        builder = builder.body(body.clone());
    }
    builder.send().await.map_err(|e| {
        let kind = if e.is_connect() {
            "could not connect"
        } else {
            "the request failed"
        };
        ToolError::new(format!(
            "fetch: {kind}: {}",
            Redactor::of(policy).redact(&e.to_string())
        ))
    })
}

/// The response as the script sees it, the body capped and every configured
/// secret blanked.
async fn read_response(
    policy: &FetchPolicy,
    response: reqwest::Response,
) -> Result<Value, ToolError> {
    let status = response.status().as_u16();
    let redactor = Redactor::of(policy);
    let mut headers = Map::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes());
        headers.insert(
            name.as_str().to_string(),
            Value::String(redactor.redact(&value)),
        );
    }
    if let Some(length) = response.content_length()
        && length > policy.max_response_bytes as u64
    {
        return Err(too_large(policy));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ToolError::new(format!("fetch: reading the response failed: {e}")))?;
        if body.len() + chunk.len() > policy.max_response_bytes {
            return Err(too_large(policy));
        }
        body.extend_from_slice(&chunk);
    }
    let text = redactor.redact(&String::from_utf8_lossy(&body));
    let json_body = serde_json::from_str::<Value>(&text).ok();
    Ok(json!({
        "status": status,
        "headers": headers,
        "text": text,
        "json": json_body,
    }))
}

fn too_large(policy: &FetchPolicy) -> ToolError {
    ToolError::new(format!(
        "fetch: the response is larger than {} bytes (the cap)",
        policy.max_response_bytes
    ))
}

/// The shortest run of a secret that is redacted on its own. Default: 8 bytes.
const REDACTED_RUN: usize = 8;

/// Replaces every configured header value in text the script is shown with
/// `[redacted]`: the whole value, and every run of at least [`REDACTED_RUN`]
/// bytes of it or of its common encodings (base64 standard and URL-safe at each
/// of its three alignments, percent-encoding, hex in either case), so a server
/// that quotes part of a token or echoes it encoded hands none of it on. Built
/// once per response from the policy's secrets.
struct Redactor {
    /// The values, each replaced whole (a short one can only be matched so).
    whole: Vec<String>,
    /// Every run of [`REDACTED_RUN`] bytes of a value or its encodings.
    runs: std::collections::HashSet<Vec<u8>>,
}

impl Redactor {
    fn of(policy: &FetchPolicy) -> Self {
        let secrets: Vec<&str> = policy
            .headers
            .iter()
            .filter_map(|secret| secret.value.to_str().ok())
            .filter(|value| !value.is_empty())
            .collect();
        Self::new(&secrets)
    }

    fn new(secrets: &[&str]) -> Self {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};

        let mut runs = std::collections::HashSet::new();
        for secret in secrets {
            let bytes = secret.as_bytes();
            let mut forms: Vec<Vec<u8>> = vec![bytes.to_vec()];
            for offset in 0..3.min(bytes.len()) {
                for engine in [&STANDARD, &URL_SAFE] {
                    forms.push(
                        engine
                            .encode(&bytes[offset..])
                            .trim_end_matches('=')
                            .as_bytes()
                            .to_vec(),
                    );
                }
            }
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            forms.push(hex.clone().into_bytes());
            forms.push(hex.to_uppercase().into_bytes());
            let percent: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
            forms.push(percent.clone().into_bytes());
            forms.push(percent.to_lowercase().into_bytes());
            let escaped: String = secret
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
            forms.push(escaped.into_bytes());
            for form in forms {
                for run in form.windows(REDACTED_RUN) {
                    runs.insert(run.to_vec());
                }
            }
        }
        Self {
            whole: secrets.iter().map(|secret| secret.to_string()).collect(),
            runs,
        }
    }

    fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.whole {
            out = out.replace(secret.as_str(), "[redacted]");
        }
        if self.runs.is_empty() || out.len() < REDACTED_RUN {
            return out;
        }
        let bytes = out.as_bytes();
        let mut marked = vec![false; bytes.len()];
        for (at, window) in bytes.windows(REDACTED_RUN).enumerate() {
            if self.runs.contains(window) {
                marked[at..at + REDACTED_RUN]
                    .iter_mut()
                    .for_each(|m| *m = true);
            }
        }
        let mut redacted = String::with_capacity(out.len());
        let mut in_run = false;
        for (at, ch) in out.char_indices() {
            if marked[at..at + ch.len_utf8()].iter().any(|m| *m) {
                if !in_run {
                    redacted.push_str("[redacted]");
                    in_run = true;
                }
            } else {
                redacted.push(ch);
                in_run = false;
            }
        }
        redacted
    }
}

/// An IPv4 address inside IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// True for an address on the public internet: not loopback, private, link-local
/// (cloud metadata services live there), shared (carrier NAT), unspecified,
/// multicast, broadcast or reserved.
fn is_public(address: IpAddr) -> bool {
    match canonical(address) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_multicast()
        || v4.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || a >= 240)
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    let first = v6.segments()[0];
    !(v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || v6.is_unique_local()
        || v6.is_unicast_link_local()
        // 64:ff9b::/96 reaches IPv4 through NAT64: judge the IPv4 address.
        || (first == 0x64 && v6.segments()[1] == 0xff9b && {
            let [.., c, d] = v6.segments();
            !is_public_v4(Ipv4Addr::from((u32::from(c) << 16) | u32::from(d)))
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns_match_exact_names_and_names_below_a_domain() {
        let exact = HostPattern::parse("API.example.com").expect("valid");
        assert!(exact.matches("api.example.com"));
        assert!(exact.matches("api.example.com."));
        assert!(!exact.matches("evil-api.example.com"));
        let below = HostPattern::parse("*.example.com").expect("valid");
        assert!(below.matches("a.example.com"));
        assert!(below.matches("a.b.example.com"));
        assert!(!below.matches("example.com"));
        assert!(!below.matches("notexample.com"));
        assert!(!below.matches("example.com.evil.org"));
        assert!(HostPattern::parse("*").is_err());
        assert!(HostPattern::parse("a.*.com").is_err());
        assert!(HostPattern::parse("").is_err());
    }

    #[test]
    fn inward_addresses_are_not_public() {
        for inward in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            let address: IpAddr = inward.parse().expect("an address");
            assert!(!is_public(address), "{inward} counted as public");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            let address: IpAddr = public.parse().expect("an address");
            assert!(is_public(address), "{public} counted as inward");
        }
    }

    #[test]
    fn networks_contain_their_addresses_only() {
        let loopback = IpNetwork::parse("127.0.0.0/8").expect("valid");
        assert!(loopback.contains("127.9.9.9".parse().expect("ip")));
        assert!(loopback.contains("::ffff:127.0.0.1".parse().expect("ip")));
        assert!(!loopback.contains("128.0.0.1".parse().expect("ip")));
        let one = IpNetwork::parse("10.0.0.5").expect("valid");
        assert!(one.contains("10.0.0.5".parse().expect("ip")));
        assert!(!one.contains("10.0.0.6".parse().expect("ip")));
        assert!(IpNetwork::parse("10.0.0.0/33").is_err());
        assert!(IpNetwork::parse("example.com").is_err());
    }

    #[test]
    fn a_secret_header_reads_its_value_from_the_environment_and_hides_it_in_debug() {
        // PATH: set wherever tests run (setting a variable needs `unsafe` here).
        let path = std::env::var("PATH").expect("PATH is set");
        let header = SecretHeader::parse("api.example.com: X-Token: t-${PATH}").expect("parses");
        assert_eq!(header.value.to_str().expect("ascii"), format!("t-{path}"));
        assert!(!format!("{header:?}").contains(&path));
        assert!(
            SecretHeader::parse("api.example.com: X-Key: $CODEACT_FETCH_TEST_UNSET_VARIABLE")
                .is_err()
        );
        assert!(SecretHeader::parse("no colons here").is_err());
    }

    /// A local server: `/json` (a JSON body), `/echo` (the request's headers as
    /// JSON), `/to-allowed` and `/to-denied` (redirects), `/big` (50 MB streamed),
    /// `/slow` (answers after 3 s).
    async fn server() -> String {
        use axum::Router;
        use axum::body::Body;
        use axum::http::HeaderMap as Headers;
        use axum::response::{IntoResponse, Redirect};
        use axum::routing::get;

        let app = Router::new()
            .route("/json", get(|| async { axum::Json(json!({"a": 1})) }))
            .route(
                "/echo",
                get(|headers: Headers| async move {
                    let seen: Map<String, Value> = headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or_default())))
                        .collect();
                    axum::Json(Value::Object(seen))
                }),
            )
            .route(
                "/to-allowed",
                get(|| async { Redirect::temporary("/json") }),
            )
            .route(
                "/to-denied",
                get(|| async { Redirect::temporary("http://denied.invalid/json") }),
            )
            .route(
                "/big",
                get(|| async {
                    let chunks = futures_util::stream::iter(
                        (0..50).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 1 << 20])),
                    );
                    Body::from_stream(chunks).into_response()
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let port = listener.local_addr().expect("bound").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://localhost:{port}")
    }

    /// Allows `localhost` and the loopback networks (where the test server is).
    fn local_policy() -> FetchPolicy {
        FetchPolicy::new()
            .allow_host(HostPattern::parse("localhost").expect("valid"))
            .allow_private_network(IpNetwork::parse("127.0.0.0/8").expect("valid"))
            .allow_private_network(IpNetwork::parse("::1").expect("valid"))
    }

    async fn fetch(policy: FetchPolicy, url: String) -> Result<Value, ToolError> {
        fetch_tool(policy).call(json!({ "url": url })).await
    }

    #[tokio::test]
    async fn an_allowed_host_answers_with_status_headers_text_and_json() {
        let base = server().await;
        let answer = fetch(local_policy(), format!("{base}/json"))
            .await
            .expect("fetched");
        assert_eq!(answer["status"], 200);
        assert_eq!(answer["json"], json!({"a": 1}));
        assert_eq!(answer["headers"]["content-type"], "application/json");
    }

    #[tokio::test]
    async fn a_host_off_the_list_is_refused_before_any_request() {
        let refused = fetch(local_policy(), "http://example.org/".into())
            .await
            .expect_err("refused");
        assert!(
            refused
                .message
                .contains("example.org is not among the allowed hosts")
        );
    }

    #[tokio::test]
    async fn an_allowed_name_that_resolves_to_a_loopback_address_is_refused_unless_its_network_is_allowed()
     {
        let base = server().await;
        let policy = FetchPolicy::new().allow_host(HostPattern::parse("localhost").expect("valid"));
        let refused = fetch(policy, format!("{base}/json"))
            .await
            .expect_err("refused");
        assert!(
            refused.message.contains("not a public address"),
            "{}",
            refused.message
        );
    }

    #[tokio::test]
    async fn redirects_are_followed_only_within_the_allowed_hosts() {
        let base = server().await;
        let followed = fetch(local_policy(), format!("{base}/to-allowed"))
            .await
            .expect("followed");
        assert_eq!(followed["json"], json!({"a": 1}));
        let refused = fetch(local_policy(), format!("{base}/to-denied"))
            .await
            .expect_err("refused");
        assert!(
            refused
                .message
                .contains("denied.invalid is not among the allowed hosts")
        );
    }

    #[tokio::test]
    async fn a_response_over_the_cap_is_refused_without_holding_it() {
        let base = server().await;
        let refused = fetch(local_policy(), format!("{base}/big"))
            .await
            .expect_err("capped");
        assert!(
            refused.message.contains("larger than 4194304 bytes"),
            "{}",
            refused.message
        );
    }

    #[tokio::test]
    async fn a_slow_server_is_cut_off_at_the_timeout() {
        let base = server().await;
        let policy = local_policy().timeout(Duration::from_millis(300));
        let refused = fetch(policy, format!("{base}/slow"))
            .await
            .expect_err("timed out");
        assert!(refused.message.contains("within 300 ms"));
    }

    #[tokio::test]
    async fn a_secret_header_is_sent_but_never_shown_to_the_script() {
        let base = server().await;
        let secret = SecretHeader::new(
            HostPattern::parse("localhost").expect("valid"),
            "x-api-key",
            "k-123456789",
        )
        .expect("valid");
        let answer = fetch(local_policy().header(secret), format!("{base}/echo"))
            .await
            .expect("fetched");
        assert_eq!(answer["json"]["x-api-key"], "[redacted]");
        assert!(!answer.to_string().contains("k-123456789"));
    }

    fn redact_secrets(secrets: &[&str], text: &str) -> String {
        Redactor::new(secrets).redact(text)
    }

    #[test]
    fn part_of_a_secret_or_its_encodings_never_reaches_the_script() {
        use base64::Engine as _;

        let secret = "s3cret-T0ken/with+odd=chars";
        let cases = [
            format!("token {} is expired", &secret[..9]),
            format!("token …{} is expired", &secret[7..19]),
            base64::engine::general_purpose::STANDARD.encode(secret),
            base64::engine::general_purpose::URL_SAFE.encode(&secret.as_bytes()[1..]),
            base64::engine::general_purpose::STANDARD.encode(&secret.as_bytes()[2..14]),
            secret
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            secret
                .bytes()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()[4..30]
                .to_string(),
            "s3cret-T0ken%2Fwith%2Bodd%3Dchars".to_string(),
            "s3cret-T0ken%2fwith".to_string(),
        ];
        for case in cases {
            let text = format!("before {case} after ü");
            let shown = redact_secrets(&[secret], &text);
            assert!(shown.contains("[redacted]"), "{text} -> {shown}");
            assert!(
                shown.starts_with("before ") && shown.ends_with(" after ü"),
                "{shown}"
            );
            for run in secret.as_bytes().windows(REDACTED_RUN) {
                let run = std::str::from_utf8(run).expect("ascii");
                assert!(!shown.contains(run), "{text} -> {shown} keeps {run}");
            }
        }
        let unrelated = "an answer about tokens and secrets, 1234567";
        assert_eq!(redact_secrets(&[secret], unrelated), unrelated);
        assert_eq!(redact_secrets(&["k1"], "k1 and k2"), "[redacted] and k2");
    }

    #[tokio::test]
    async fn the_request_budget_is_spent_once() {
        let base = server().await;
        let tool = fetch_tool(local_policy().max_requests(1));
        let url = json!({ "url": format!("{base}/json") });
        assert!(tool.call(url.clone()).await.is_ok());
        let refused = tool.call(url).await.expect_err("budget spent");
        assert!(refused.message.contains("budget of 1 requests"));
    }

    #[tokio::test]
    async fn urls_with_credentials_or_other_schemes_are_refused() {
        for url in [
            "file:///etc/passwd",
            "http://user:pw@localhost/",
            "ftp://localhost/",
        ] {
            let refused = fetch(local_policy(), url.into())
                .await
                .expect_err("refused");
            assert!(
                refused.message.starts_with("fetch: "),
                "{url}: {}",
                refused.message
            );
        }
    }
}
