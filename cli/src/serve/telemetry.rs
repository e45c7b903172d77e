//! OpenTelemetry export for `codeact serve` and `codeact worker`: traces and
//! metrics over OTLP/HTTP (protobuf), when an endpoint is configured.
//!
//! ```toml
//! [telemetry]
//! endpoint = "http://127.0.0.1:4318"  # the collector's OTLP/HTTP base URL; default: none
//! service_name = "codeact"            # `service.name` of what is sent; default: codeact
//! ```
//!
//! **Where the endpoint comes from.** The config file's `endpoint` wins; without
//! one, `OTEL_EXPORTER_OTLP_ENDPOINT` from the environment (then the per-signal
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and `…_METRICS_ENDPOINT` refine it, as
//! the OpenTelemetry spec says); with neither, nothing is exported and no
//! exporter is built. The config wins because it is the one place an operator
//! states what this server does (agents, limits, tokens), and a variable left
//! in a shared environment should not redirect it; the environment is the
//! fallback for deployments that configure every process's telemetry the
//! same way. `OTEL_SDK_DISABLED=true` turns export off either way.
//! `service_name` likewise wins over `OTEL_SERVICE_NAME`. Traces go to
//! `{endpoint}/v1/traces`, metrics to `{endpoint}/v1/metrics`; the SDK's other
//! variables still apply (`OTEL_EXPORTER_OTLP_HEADERS` for a collector's token,
//! `OTEL_EXPORTER_OTLP_TIMEOUT` (default 10 s), `OTEL_BSP_*` for batching,
//! `OTEL_METRIC_EXPORT_INTERVAL` (default 60 s), `OTEL_RESOURCE_ATTRIBUTES`).
//!
//! **Traces.** Every piece of work on a run (its start, its continuation after
//! an approval or a chat's next message, a takeover from a lost worker) is one
//! trace, rooted in a `run` span that names the run (`codeact.run.id`), its
//! agent, the job, whether it resumed from the journal, and how it ended
//! (`codeact.status`, `codeact.outcome`, steps, token usage). A run that went
//! through several pieces of work, on one worker or several, is therefore
//! several traces sharing `codeact.run.id`: a worker taking a run over cannot
//! continue a span another process opened, and the store keeps no trace
//! context, so the attribute is the link to search by. Under the `run` span,
//! the loop's own spans (see `codeact::agent::spans`): `model` per model call,
//! `script` per script with `tool` per tool call beneath it, `replay` per
//! script re-run on resume, with code and outputs cut to 1 KiB. Spans are
//! batched on a thread of the SDK's and sent every 5 s (`OTEL_BSP_SCHEDULE_DELAY`);
//! only spans of the `codeact` crate at INFO and above are exported, whatever
//! `RUST_LOG` says about the log on stderr.
//!
//! **Metrics.** `http.server.request.duration` (seconds, by `http.route`,
//! `http.request.method` and `http.response.status_code`; its count is the
//! request count; for the event stream, the time to its first byte),
//! `codeact.runs.started` (by `codeact.agent` and `codeact.run.job`),
//! `codeact.runs.finished` (by agent, `codeact.status` and `codeact.outcome`),
//! `codeact.run.duration` (seconds, same attributes), and `codeact.queue.depth`
//! (runs `queued` and `running` in the store, by `codeact.status`, sampled
//! every [`QUEUE_SAMPLE_EVERY`](super::runs::QUEUE_SAMPLE_EVERY)).
//!
//! **Shutdown.** At SIGTERM or Ctrl-C, once the process stopped (its runs
//! finished or handed back), what is still batched is sent before it exits,
//! waiting at most the exporter's timeout. A process killed outright loses
//! what it had not sent yet, and the spans of runs it had not finished.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::Deserialize;

/// The `[telemetry]` table of the server's config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetryEntry {
    /// The collector's OTLP/HTTP base URL (`http://host:4318`).
    pub endpoint: Option<String>,
    /// `service.name`.
    pub service_name: Option<String>,
}

/// The config file with only the table read here: telemetry starts before the
/// rest of the config is loaded, so that loading it is already traced and
/// logged through the same subscriber.
#[derive(Deserialize)]
struct OnlyTelemetry {
    #[serde(default)]
    telemetry: TelemetryEntry,
}

/// Reads the `[telemetry]` table of the config at `path`. A file that cannot be
/// read or parsed gives the default (no endpoint): loading the whole config
/// reports that problem right after, with its full message.
pub(crate) fn read_entry(path: &Path) -> Result<TelemetryEntry, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(TelemetryEntry::default());
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return Ok(TelemetryEntry::default());
    };
    let Some(entry) = table.get("telemetry") else {
        return Ok(TelemetryEntry::default());
    };
    let wrapped = toml::Table::from_iter([("telemetry".to_string(), entry.clone())]);
    wrapped
        .try_into::<OnlyTelemetry>()
        .map(|read| read.telemetry)
        .map_err(|e| format!("'{}': [telemetry]: {e}", path.display()))
}

/// Where spans and metrics go, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    /// From the config: `{base}/v1/traces` and `{base}/v1/metrics`.
    Config(String),
    /// From `OTEL_EXPORTER_OTLP_ENDPOINT`: the exporter resolves it (and the
    /// per-signal variables) itself.
    Environment(String),
}

impl Endpoint {
    /// The endpoint `entry` and the environment (`env`) give, if any.
    fn resolve(entry: &TelemetryEntry, env: impl Fn(&str) -> Option<String>) -> Option<Self> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let set = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
        if let Some(endpoint) = set(entry.endpoint.clone()) {
            return Some(Self::Config(
                endpoint.trim().trim_end_matches('/').to_string(),
            ));
        }
        set(env("OTEL_EXPORTER_OTLP_ENDPOINT")).map(Self::Environment)
    }

    fn shown(&self) -> String {
        match self {
            Self::Config(base) => base.clone(),
            Self::Environment(base) => format!("{base} (OTEL_EXPORTER_OTLP_ENDPOINT)"),
        }
    }
}

/// Whether this process exports (set once, by [`Telemetry::start`]).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans and metrics are being exported.
pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The exporters of a process that exports; [`Telemetry::shutdown`] sends what
/// is left.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Builds the exporters when an endpoint is configured (see the module),
    /// and makes the meter provider the global one; `None` without one.
    /// `process` (`serve`, `worker`) becomes the `codeact.process` resource
    /// attribute. Prints where it exports on stderr.
    pub(crate) fn start(entry: &TelemetryEntry, process: &str) -> Result<Option<Self>, String> {
        Self::start_with(entry, process, |name| std::env::var(name).ok())
    }

    fn start_with(
        entry: &TelemetryEntry,
        process: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, String> {
        let Some(endpoint) = Endpoint::resolve(entry, &env) else {
            return Ok(None);
        };
        let service = entry
            .service_name
            .clone()
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "codeact".into());
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attribute(KeyValue::new("codeact.process", process.to_string()))
            .build();
        // The exporter's HTTP client may be built with TLS but no crypto
        // provider chosen (the MCP client's reqwest features): ring, as there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let signal = |path: &str| match &endpoint {
            Endpoint::Config(base) => Some(format!("{base}{path}")),
            Endpoint::Environment(_) => None,
        };
        let invalid = |e: opentelemetry_otlp::ExporterBuildError| {
            format!("telemetry: cannot export to {}: {e}", endpoint.shown())
        };
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
        if let Some(url) = signal("/v1/traces") {
            spans = spans.with_endpoint(url);
        }
        let spans = spans.build().map_err(invalid)?;
        let mut metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
        if let Some(url) = signal("/v1/metrics") {
            metrics = metrics.with_endpoint(url);
        }
        let metrics = metrics.build().map_err(invalid)?;
        let tracer = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(spans)
            .build();
        let meter = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_periodic_exporter(metrics)
            .build();
        opentelemetry::global::set_meter_provider(meter.clone());
        EXPORTING.store(true, Ordering::Relaxed);
        eprintln!(
            "codeact {process}: exporting traces and metrics over OTLP/HTTP to {}",
            endpoint.shown()
        );
        Ok(Some(Self { tracer, meter }))
    }

    /// The `tracing` layer that turns the crate's spans (INFO and above, target
    /// `codeact…`) into OpenTelemetry spans for the exporter.
    pub(crate) fn layer(
        &self,
    ) -> impl tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static {
        use tracing_subscriber::Layer as _;
        let filter = tracing_subscriber::filter::Targets::new()
            .with_target("codeact", tracing::level_filters::LevelFilter::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.tracer("codeact"))
            .with_filter(filter)
    }

    /// Sends what is still batched and stops the exporters, blocking up to the
    /// exporter's timeout for each signal. Called once the process stopped.
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.tracer.shutdown() {
            tracing::warn!("telemetry: the last spans were not all sent: {e}");
        }
        if let Err(e) = self.meter.shutdown() {
            tracing::warn!("telemetry: the last metrics were not all sent: {e}");
        }
    }
}

/// The instruments `codeact serve` and `codeact worker` record into, on the
/// global meter provider: no-ops when nothing exports.
pub(crate) struct Metrics {
    requests: Histogram<f64>,
    started: Counter<u64>,
    finished: Counter<u64>,
    run_time: Histogram<f64>,
    queue: Gauge<u64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let meter = opentelemetry::global::meter("codeact");
        Self {
            requests: meter
                .f64_histogram("http.server.request.duration")
                .with_unit("s")
                .with_description("HTTP requests by route: their count and duration")
                .with_boundaries(vec![
                    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                ])
                .build(),
            started: meter
                .u64_counter("codeact.runs.started")
                .with_description(
                    "Pieces of work begun on runs (a start, a continuation, a takeover)",
                )
                .build(),
            finished: meter
                .u64_counter("codeact.runs.finished")
                .with_description("Pieces of work on runs ended, by status and outcome")
                .build(),
            run_time: meter
                .f64_histogram("codeact.run.duration")
                .with_unit("s")
                .with_description("How long a piece of work on a run took")
                .with_boundaries(vec![
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                ])
                .build(),
            queue: meter
                .u64_gauge("codeact.queue.depth")
                .with_description("Runs queued and running in the store")
                .build(),
        }
    }

    /// One HTTP request answered.
    pub(crate) fn request(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.requests.record(
            took.as_secs_f64(),
            &[
                KeyValue::new("http.route", route.to_string()),
                KeyValue::new("http.request.method", method.to_string()),
                KeyValue::new("http.response.status_code", i64::from(status)),
            ],
        );
    }

    /// A piece of work on a run of `agent` began (`job`: start, decide, message).
    pub(crate) fn run_started(&self, agent: &str, job: &'static str) {
        self.started.add(
            1,
            &[
                KeyValue::new("codeact.agent", agent.to_string()),
                KeyValue::new("codeact.run.job", job),
            ],
        );
    }

    /// A piece of work on a run ended with `status` and `outcome` (the
    /// outcome's kind, `none` without one) after `took`.
    pub(crate) fn run_finished(&self, agent: &str, status: &str, outcome: &str, took: Duration) {
        let attributes = [
            KeyValue::new("codeact.agent", agent.to_string()),
            KeyValue::new("codeact.status", status.to_string()),
            KeyValue::new("codeact.outcome", outcome.to_string()),
        ];
        self.finished.add(1, &attributes);
        self.run_time.record(took.as_secs_f64(), &attributes);
    }

    pub(crate) fn queue_depth(&self, queued: u64, running: u64) {
        self.queue
            .record(queued, &[KeyValue::new("codeact.status", "queued")]);
        self.queue
            .record(running, &[KeyValue::new("codeact.status", "running")]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(endpoint: Option<&str>) -> TelemetryEntry {
        TelemetryEntry {
            endpoint: endpoint.map(str::to_string),
            service_name: None,
        }
    }

    /// If this fails, the documented precedence of the config over the
    /// environment changed, or an unset endpoint builds an exporter anyway.
    #[test]
    fn the_config_endpoint_wins_over_the_environment_and_neither_means_no_export() {
        let env = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://env:4318".to_string())
        };
        let none = |_: &str| None;
        assert_eq!(
            Endpoint::resolve(&entry(Some("http://config:4318/")), env),
            Some(Endpoint::Config("http://config:4318".into()))
        );
        assert_eq!(
            Endpoint::resolve(&entry(None), env),
            Some(Endpoint::Environment("http://env:4318".into()))
        );
        assert_eq!(Endpoint::resolve(&entry(Some(" ")), none), None);
        assert_eq!(Endpoint::resolve(&entry(None), none), None);
        let disabled = |name: &str| (name == "OTEL_SDK_DISABLED").then(|| "true".to_string());
        assert_eq!(
            Endpoint::resolve(&entry(Some("http://config:4318")), disabled),
            None
        );
        let started = Telemetry::start_with(&entry(None), "serve", none);
        assert!(matches!(started, Ok(None)), "{started:?}");
        assert!(!exporting());
    }

    /// If this fails, a typo in `[telemetry]` is silently ignored, or the
    /// table cannot be read before the rest of the config.
    #[test]
    fn the_telemetry_table_is_read_alone_and_strictly() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("serve.toml");
        std::fs::write(
            &path,
            "[server]\nmax_body_kib = 4\n\n[telemetry]\nendpoint = \"http://127.0.0.1:4318\"\n",
        )
        .expect("written");
        let read = read_entry(&path).expect("read");
        assert_eq!(read.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        std::fs::write(&path, "[telemetry]\nendpont = \"x\"\n").expect("written");
        let error = read_entry(&path).expect_err("an unknown key");
        assert!(error.contains("endpont"), "{error}");
        assert!(read_entry(&dir.path().join("missing.toml")).is_ok());
    }
}
