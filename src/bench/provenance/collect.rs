//! Reading what serves each target, before the first level (thin I/O around [`super`]'s parsing):
//! its own endpoints (`/version`, `/get_server_info`, `/info`, `/props` at the server's root,
//! `/models` under its base URL) and one scrape of its metrics endpoints for the DCGM labels,
//! all at once, each a bounded `GET` through [`crate::transport::Fetcher`] (no proxy, the
//! target's TLS trust, the target's key on the target's own origin), within [`TIMEOUT`] in all.
//! An endpoint that is absent, fails, or does not answer 200 is skipped without a word.

use super::{Answers, Gpus, Provenance, ServerInfo};
use crate::bench::BenchModel;
use crate::bench::efficiency::GpuCount;
use crate::config::Target;
use crate::servermetrics::Endpoint;
use crate::transport::Fetcher;
use std::sync::Arc;
use std::time::Duration;

/// The longest the whole collection may take.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer read of an endpoint (llama.cpp's `/props` carries its chat template).
pub const MAX_BYTES: usize = 512 * 1024;

/// The server's root: the base URL without its trailing `/v1` (where vLLM, SGLang, TGI and
/// llama.cpp serve their own endpoints).
pub fn server_root(base_url: &str) -> &str {
    let b = base_url.trim_end_matches('/');
    b.strip_suffix("/v1").unwrap_or(b)
}

/// `GET url` with the target's key (on its own origin); the body of a 200 answer.
async fn get(client: &mut Fetcher, url: &str, target: &Target) -> Option<Vec<u8>> {
    let mut headers = vec![(
        hyper::header::ACCEPT,
        hyper::header::HeaderValue::from_static("application/json"),
    )];
    if crate::servermetrics::same_origin(url, &target.base_url)
        && let Ok(Some(key)) = target.load_key().await
        && let Ok(h) = target.auth.header(&key)
    {
        headers.push(h);
    }
    let got = client.get(url, &headers, MAX_BYTES).await.ok()?;
    (got.status == 200).then_some(got.body)
}

/// The answers of one target's own endpoints.
async fn answers(target: &Target) -> Answers {
    let root = server_root(&target.base_url);
    let one = |url: String| async move {
        let mut client = Fetcher::new(target.tls.clone(), TIMEOUT).ok()?;
        get(&mut client, &url, target).await
    };
    let (version, server_info, info, props, models) = tokio::join!(
        one(format!("{root}/version")),
        one(format!("{root}/get_server_info")),
        one(format!("{root}/info")),
        one(format!("{root}/props")),
        one(target.models_url()),
    );
    Answers {
        version,
        server_info,
        info,
        props,
        models,
    }
}

/// One scrape of each endpoint: the DCGM samples, tagged by endpoint.
async fn dcgm(endpoints: &[Endpoint]) -> Vec<(usize, crate::servermetrics::expo::Reading)> {
    let all =
        futures_util::future::join_all(endpoints.iter().enumerate().map(|(i, ep)| async move {
            let Ok(mut client) = Fetcher::new(crate::transport::TlsOptions::default(), ep.timeout)
            else {
                return Vec::new();
            };
            crate::servermetrics::scrape::scrape_once(&mut client, ep)
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|s| s.name.starts_with("DCGM_FI_"))
                .map(|s| (i, s))
                .collect::<Vec<_>>()
        }))
        .await;
    all.into_iter().flatten().collect()
}

/// What served each target of `models` (each model's metrics endpoints in `endpoints`, in the
/// plan's order), read within [`TIMEOUT`]; an endpoint that does not answer in time is skipped.
/// Every value is shown through `redactor` (the run's: every target's secrets).
pub async fn collect(
    models: &[BenchModel],
    endpoints: &[Vec<Endpoint>],
    redactor: &crate::redact::Redactor,
) -> Provenance {
    let mut targets: Vec<(Arc<Target>, Vec<Endpoint>)> = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let eps = endpoints.get(i).cloned().unwrap_or_default();
        match targets.iter_mut().find(|(t, _)| t.name == m.target.name) {
            Some((_, e)) => {
                for ep in eps {
                    if !e.contains(&ep) {
                        e.push(ep);
                    }
                }
            }
            None => targets.push((m.target.clone(), eps)),
        }
    }
    let servers = futures_util::future::join_all(targets.iter().map(|(t, eps)| async move {
        let work = async {
            let (a, samples) = tokio::join!(answers(t), dcgm(eps));
            (a, samples)
        };
        let (a, samples) = tokio::time::timeout(TIMEOUT, work)
            .await
            .unwrap_or_default();
        let redact = |s: &str| redactor.redact(s);
        let mut info: ServerInfo = super::server_info(&t.name, &a, &redact);
        let found = super::dcgm_gpus(&samples);
        let dcgm_devices = found.as_ref().map(|f| f.0);
        info.gpus = GpuCount::of(t.gpus, dcgm_devices).map(|count| {
            let (models, driver) = found.map(|(_, m, d)| (m, d)).unwrap_or_default();
            Gpus {
                count,
                dcgm_devices,
                models: models.iter().map(|m| super::clean(m, &redact)).collect(),
                driver: driver.map(|d| super::clean(&d, &redact)),
            }
        });
        info
    }))
    .await;
    Provenance {
        tokenprobe: env!("CARGO_PKG_VERSION").to_owned(),
        client: super::client_host(),
        servers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake vLLM (its `/version` and `/v1/models`, the models only with the key) beside a
    /// DCGM exporter: what served the run is read from them, absent endpoints skipped silently,
    /// the key sent to the target's own origin only and never recorded.
    #[tokio::test]
    async fn what_a_fake_vllm_and_its_dcgm_say() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let keyed = head.contains("authorization: bearer tok-prov-1");
                    let (status, body): (&str, Vec<u8>) = match path.as_str() {
                        "/version" => ("200 OK", br#"{"version":"0.10.1"}"#.to_vec()),
                        "/v1/models" if keyed => (
                            "200 OK",
                            include_bytes!("../../../tests/fixtures/provenance/vllm.models.json")
                                .to_vec(),
                        ),
                        "/v1/models" => ("401 Unauthorized", Vec::new()),
                        "/metrics" if !keyed => (
                            "200 OK",
                            include_bytes!(
                                "../../../tests/fixtures/servermetrics/dcgm.before.prom"
                            )
                            .to_vec(),
                        ),
                        _ => ("404 Not Found", Vec::new()),
                    };
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                    let _ = s.write_all(&body).await;
                });
            }
        });
        let cfg = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n\
             targets:\n  - name: box\n    base_url: http://{addr}/v1\n    api_key: tok-prov-1\n    models: [m]\n"
        ))
        .unwrap();
        let (_, models) = crate::bench::choose(&cfg, None, None, &[]).unwrap();
        // The metrics endpoint at another origin (so without the key).
        let metrics = Endpoint::new(&format!("http://localhost:{}/metrics", addr.port()), None);
        let mut r = crate::redact::Redactor::new();
        r.add_secret("tok-prov-1");
        let p = collect(&models, &[vec![metrics]], &r).await;
        let s = &p.servers[0];
        assert_eq!(s.target, "box");
        assert_eq!(s.server, Some(super::super::ServerKind::Vllm));
        assert_eq!(s.version.as_deref(), Some("0.10.1"));
        assert_eq!(s.models[0].max_model_len, Some(131_072));
        let g = s.gpus.as_ref().unwrap();
        assert_eq!(
            (g.count.count, g.count.source, g.dcgm_devices),
            (2, crate::bench::efficiency::GpuSource::Dcgm, Some(2))
        );
        assert_eq!(g.driver.as_deref(), Some("535.129.03"));
        assert_eq!(p.tokenprobe, env!("CARGO_PKG_VERSION"));
        assert!(!serde_json::to_string(&p).unwrap().contains("tok-prov-1"));
        // Nothing answers: a record of the target alone, quickly.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let cfg = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n\
             targets:\n  - name: gone\n    base_url: http://{closed}/v1\n    models: [m]\n    gpus: 4\n"
        ))
        .unwrap();
        let (_, models) = crate::bench::choose(&cfg, None, None, &[]).unwrap();
        let t = std::time::Instant::now();
        let p = collect(&models, &[Vec::new()], &crate::redact::Redactor::new()).await;
        assert!(t.elapsed() < TIMEOUT);
        let s = &p.servers[0];
        assert_eq!((s.server, &s.version, s.models.len()), (None, &None, 0));
        assert_eq!(
            s.gpus.as_ref().map(|g| (g.count.count, g.count.source)),
            Some((4, crate::bench::efficiency::GpuSource::Config))
        );
    }

    #[test]
    fn the_server_root_is_the_base_url_without_v1() {
        assert_eq!(server_root("http://h:8000/v1"), "http://h:8000");
        assert_eq!(server_root("http://h:8000/v1/"), "http://h:8000");
        assert_eq!(server_root("http://h:8080"), "http://h:8080");
        assert_eq!(server_root("https://gw/llm/v1"), "https://gw/llm");
    }
}
