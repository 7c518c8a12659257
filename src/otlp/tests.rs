use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

fn attr(c: &OtlpConfig, key: &str) -> Option<String> {
    c.resource.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            proto::Value::String(s) => Some(s.clone()),
            proto::Value::Int(i) => Some(i.to_string()),
        }
    })
}

#[test]
fn nothing_is_exported_unless_the_variables_ask() {
    assert!(OtlpConfig::from_env(env(&[])).unwrap().is_none());
    assert!(
        OtlpConfig::from_env(env(&[("OTEL_METRICS_EXPORTER", "none")]))
            .unwrap()
            .is_none()
    );
    assert!(
        OtlpConfig::from_env(env(&[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_SDK_DISABLED", "true")
        ]))
        .unwrap()
        .is_none()
    );
    let c = OtlpConfig::from_env(env(&[("OTEL_METRICS_EXPORTER", "prometheus, otlp")]))
        .unwrap()
        .unwrap();
    assert_eq!(c.endpoint, "http://localhost:4318/v1/metrics");
    assert_eq!(c.interval, Duration::from_secs(60));
    assert_eq!(c.timeout, Duration::from_secs(10));
    assert_eq!(attr(&c, "service.name").as_deref(), Some("tokenprobe"));
}

#[test]
fn the_standard_variables_set_endpoint_headers_interval_and_resource() {
    let c = OtlpConfig::from_env(env(&[
        ("OTEL_METRICS_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-tenant=a,authorization=Bearer%20s3cret",
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=b"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod,service.name=x",
        ),
        ("OTEL_SERVICE_NAME", "llm-probes"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "https://collector:4318/v1/metrics");
    let h: Vec<(String, String)> = c
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        h,
        [
            ("authorization".to_owned(), "Bearer s3cret".to_owned()),
            ("x-tenant".to_owned(), "b".to_owned())
        ]
    );
    assert!(c.headers.iter().all(|(_, v)| v.is_sensitive()));
    assert_eq!(
        (c.timeout, c.interval),
        (Duration::from_millis(2500), Duration::from_secs(1))
    );
    assert_eq!(attr(&c, "service.name").as_deref(), Some("llm-probes"));
    assert_eq!(attr(&c, "deployment.environment").as_deref(), Some("prod"));
    // The signal's own endpoint is used as given.
    let c = OtlpConfig::from_env(env(&[
        ("OTEL_METRICS_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://b:9000/otlp/metrics",
        ),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://b:9000/otlp/metrics");
}

#[test]
fn unusable_variables_are_named_and_secrets_never_quoted() {
    for (pairs, var, want) in [
        (
            vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/protobuf only",
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "not an http",
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_HEADERS", "authorization")],
            "OTEL_EXPORTER_OTLP_HEADERS",
            "KEY=VALUE",
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_HEADERS", "a=s3cret%0A")],
            "OTEL_EXPORTER_OTLP_HEADERS",
            "not a valid header value",
        ),
        (
            vec![("OTEL_METRIC_EXPORT_INTERVAL", "1s")],
            "OTEL_METRIC_EXPORT_INTERVAL",
            "milliseconds",
        ),
        (
            vec![("OTEL_METRIC_EXPORT_INTERVAL", "5")],
            "OTEL_METRIC_EXPORT_INTERVAL",
            "between 100",
        ),
    ] {
        let mut all = vec![("OTEL_METRICS_EXPORTER", "otlp")];
        all.extend(pairs);
        let e = OtlpConfig::from_env(env(&all)).unwrap_err();
        let OtlpError::Var { var: got, .. } = &e;
        assert_eq!(*got, var);
        let text = e.to_string();
        assert!(text.contains(want), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}
