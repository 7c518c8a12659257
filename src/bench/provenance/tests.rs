use super::*;
use crate::bench::efficiency::GpuSource;

const VLLM_VERSION: &[u8] = include_bytes!("../../../tests/fixtures/provenance/vllm.version.json");
const VLLM_MODELS: &[u8] = include_bytes!("../../../tests/fixtures/provenance/vllm.models.json");
const SGLANG: &[u8] =
    include_bytes!("../../../tests/fixtures/provenance/sglang.get_server_info.json");
const TGI: &[u8] = include_bytes!("../../../tests/fixtures/provenance/tgi.info.json");
const LLAMACPP: &[u8] = include_bytes!("../../../tests/fixtures/provenance/llamacpp.props.json");
const DCGM: &str = include_str!("../../../tests/fixtures/servermetrics/dcgm.before.prom");

fn none(s: &str) -> String {
    s.to_owned()
}

#[test]
fn vllm_version_and_its_models() {
    let a = Answers {
        version: Some(VLLM_VERSION.to_vec()),
        models: Some(VLLM_MODELS.to_vec()),
        ..Answers::default()
    };
    let s = server_info("gpu-box", &a, &none);
    assert_eq!(s.server, Some(ServerKind::Vllm));
    assert_eq!(s.version.as_deref(), Some("0.11.0"));
    assert!(s.settings.is_empty());
    assert_eq!(
        s.models,
        [ListedModel {
            id: "meta-llama/Llama-3.1-8B-Instruct".into(),
            root: Some("/models/Llama-3.1-8B-Instruct".into()),
            max_model_len: Some(131_072),
            owned_by: Some("vllm".into()),
        }]
    );
}

#[test]
fn sglang_settings_are_an_allowlist_and_its_secrets_never_kept() {
    // SGLang answers /version as well: its server info decides the type.
    let a = Answers {
        server_info: Some(SGLANG.to_vec()),
        version: Some(br#"{"version":"0.4.6.post1"}"#.to_vec()),
        ..Answers::default()
    };
    // The target's key, were a server to echo it in a setting, is hidden there.
    let mut r = crate::redact::Redactor::new();
    r.add_secret("flashinfer");
    let redact = |s: &str| r.redact(s);
    let s = server_info("sg", &a, &redact);
    assert_eq!(s.server, Some(ServerKind::Sglang));
    assert_eq!(s.version.as_deref(), Some("0.4.6.post1"));
    assert_eq!(s.settings["tp_size"], "2");
    assert_eq!(s.settings["chunked_prefill_size"], "8192");
    assert_eq!(s.settings["served_model_name"], "qwen-7b");
    assert_eq!(s.settings["disable_radix_cache"], "false");
    assert_eq!(s.settings["attention_backend"], "<redacted>");
    // null settings are not settings.
    assert!(!s.settings.contains_key("quantization"));
    assert!(!s.settings.contains_key("api_key"));
    assert!(!s.settings.contains_key("port"));
    // A path with credentials is shown without them.
    assert_eq!(
        s.settings["model_path"],
        "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct"
    );
    let json = serde_json::to_string(&s).unwrap();
    for secret in ["sk-server-args-key", "hf_SECRETTOKEN123", "hf-user"] {
        assert!(!json.contains(secret), "{secret} in {json}");
    }
}

#[test]
fn tgi_info_and_llamacpp_props() {
    let tgi = server_info(
        "tgi",
        &Answers {
            info: Some(TGI.to_vec()),
            ..Answers::default()
        },
        &none,
    );
    assert_eq!(tgi.server, Some(ServerKind::Tgi));
    assert_eq!(tgi.version.as_deref(), Some("3.0.1"));
    assert_eq!(tgi.settings["model_id"], "bigscience/bloom-560m");
    assert_eq!(tgi.settings["max_total_tokens"], "2048");
    assert_eq!(tgi.settings["model_dtype"], "torch.float16");
    let llama = server_info(
        "llama",
        &Answers {
            props: Some(LLAMACPP.to_vec()),
            ..Answers::default()
        },
        &none,
    );
    assert_eq!(llama.server, Some(ServerKind::LlamaCpp));
    assert_eq!(llama.version.as_deref(), Some("b5478-f5cd27b7"));
    assert_eq!(llama.settings["n_ctx"], "4096");
    assert_eq!(llama.settings["total_slots"], "2");
    // The chat template is not a setting kept.
    assert_eq!(llama.settings.len(), 3, "{:?}", llama.settings);
}

#[test]
fn absent_or_foreign_answers_are_no_server() {
    let a = Answers {
        // A gateway's HTML, an OpenAI-style error, a JSON array.
        version: Some(b"<html>404</html>".to_vec()),
        info: Some(br#"{"error":{"message":"not found"}}"#.to_vec()),
        props: Some(b"[1,2]".to_vec()),
        models: Some(br#"{"data":"nope"}"#.to_vec()),
        server_info: None,
    };
    let s = server_info("api", &a, &none);
    assert_eq!(
        s,
        ServerInfo {
            target: "api".into(),
            ..ServerInfo::default()
        }
    );
    // A long value is cut.
    let long = format!(r#"{{"version":"{}"}}"#, "9".repeat(500));
    let s = server_info(
        "x",
        &Answers {
            version: Some(long.into_bytes()),
            ..Answers::default()
        },
        &none,
    );
    assert_eq!(s.version.unwrap().chars().count(), MAX_VALUE_CHARS + 1);
}

#[test]
fn gpus_model_count_and_driver_from_the_dcgm_labels() {
    let samples: Vec<(usize, crate::servermetrics::expo::Reading)> =
        crate::servermetrics::expo::parse(DCGM)
            .unwrap()
            .into_iter()
            .map(|s| (0, s))
            .collect();
    let (n, models, driver) = dcgm_gpus(&samples).unwrap();
    assert_eq!(n, 2);
    assert_eq!(models, ["NVIDIA H100 80GB HBM3"]);
    assert_eq!(driver.as_deref(), Some("535.129.03"));
    // The same GPUs from a second endpoint are other devices.
    let mut twice = samples.clone();
    twice.extend(samples.iter().map(|(_, s)| (1, s.clone())));
    assert_eq!(dcgm_gpus(&twice).unwrap().0, 4);
    assert_eq!(dcgm_gpus(&[]), None);
}

fn run(version: &str, gpus: u32) -> Provenance {
    Provenance {
        tokenprobe: "0.1.0".into(),
        client: ClientHost {
            cores: Some(8),
            kernel: Some("6.8.0".into()),
            os: "linux x86_64".into(),
        },
        servers: vec![ServerInfo {
            target: "gpu-box".into(),
            server: Some(ServerKind::Vllm),
            version: Some(version.into()),
            gpus: Some(Gpus {
                count: GpuCount {
                    count: gpus,
                    source: GpuSource::Config,
                },
                dcgm_devices: None,
                models: vec!["NVIDIA H100 80GB HBM3".into()],
                driver: Some("535.129.03".into()),
            }),
            ..ServerInfo::default()
        }],
    }
}

#[test]
fn what_changed_between_two_runs() {
    let old = run("0.10.1", 8);
    let new = run("0.11.0", 4);
    assert_eq!(changes(&old, &new), ["vLLM 0.10.1 → 0.11.0", "GPUs 8 → 4"]);
    assert_eq!(changes(&new, &new), Vec::<String>::new());
    // A record without servers (an older report) says nothing of them.
    assert_eq!(changes(&Provenance::default(), &new), Vec::<String>::new());
    // Another server type, a setting, a fingerprint, the client.
    let mut other = new.clone();
    other.servers[0].server = Some(ServerKind::Sglang);
    other.servers[0].version = Some("0.4.6".into());
    other.client.cores = Some(2);
    let mut with_fp = new.clone();
    with_fp.servers[0].served = vec![Served {
        model: "m".into(),
        served_models: vec!["m".into()],
        fingerprints: vec!["fp_a".into()],
    }];
    let mut fp_b = with_fp.clone();
    fp_b.servers[0].served[0].fingerprints = vec!["fp_b".into()];
    assert_eq!(changes(&with_fp, &fp_b), ["m: fingerprint fp_a → fp_b"]);
    assert_eq!(
        changes(&new, &other),
        ["vLLM 0.11.0 → SGLang 0.4.6", "client cores 8 → 2"]
    );
}

#[test]
fn the_served_tally_keeps_each_models_names_and_fingerprints() {
    use crate::bench::LevelSink as _;
    let mut r = crate::bench::report::tests::synthetic();
    let m = r.models.remove(0);
    let mut l = m.levels[0].clone();
    let mut samples = crate::bench::report::tests::samples(4, 0.1, 8, 0.01, 0);
    samples[0].served_model = Some("m-2025".into());
    samples[1].served_model = Some("m-2025".into());
    samples[2].system_fingerprint = Some("fp_1".into());
    l.samples = Some(samples);
    let t = ServedTally::default();
    t.level_done(&m, &l);
    t.level_done(&m, &l);
    let target = m.target.clone().unwrap_or_default();
    assert_eq!(
        t.served(&target),
        [Served {
            model: m.model.clone(),
            served_models: vec!["m-2025".into()],
            fingerprints: vec!["fp_1".into()],
        }]
    );
    assert!(t.served("other").is_empty());
}
