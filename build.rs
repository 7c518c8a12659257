//! Lays out the `tokenprobe` binary so the code `serve` runs sits together.
//!
//! Linux maps a binary's code in 64 KiB runs around each page it touches, so
//! a process that runs 2 MiB of functions scattered over 13 MiB of code keeps
//! nearly all 13 MiB resident. `link/symbol-order.txt` lists the functions a
//! `serve` with 20 jobs ran (the steady state's first), then those a `bench`
//! run added; it is made by `link/symbol-order.sh` (under callgrind) and is
//! handed to the linker (`--symbol-ordering-file`). A name the build no longer
//! has is skipped, so a stale list costs only the layout, never the build.
//!
//! The position-independent binary's relocations are packed (`-z
//! pack-relative-relocs`, DT_RELR) where the C library it is linked against
//! reads them (glibc 2.36 and later): 835 KiB of `.rela.dyn`, read at every
//! start and then kept resident, become a few KiB. Such a binary needs glibc
//! 2.36 where it runs, as the container image (Debian 12) has.
//!
//! Only where the linker is known to be LLD: Rust 1.90 and later link
//! `x86_64-unknown-linux-gnu` with its own LLD unless a linker is set. Set
//! `TOKENPROBE_SYMBOL_ORDER=0` to leave the layout to the linker (neither of
//! the two is then asked for).

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER: &str = "link/symbol-order.txt";

fn main() {
    println!("cargo::rerun-if-changed={ORDER}");
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "TOKENPROBE_SYMBOL_ORDER",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
        "RUSTC_LINKER",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if env::var("TOKENPROBE_SYMBOL_ORDER").is_ok_and(|v| v == "0") {
        return;
    }
    let target = env::var("TARGET").unwrap_or_default();
    let linker_set = env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
        || env::var_os("RUSTC_LINKER").is_some()
        || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("link"));
    if target != "x86_64-unknown-linux-gnu" || linker_set || !rustc_links_with_lld() {
        return;
    }
    let Ok(dir) = env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = Path::new(&dir).join(ORDER);
    if !order.is_file() {
        return;
    }
    println!(
        "cargo::rustc-link-arg-bin=tokenprobe=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo::rustc-link-arg-bin=tokenprobe=-Wl,--no-warn-symbol-ordering");
    if libc_reads_relr() {
        println!("cargo::rustc-link-arg-bin=tokenprobe=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the glibc this build links against reads packed relative
/// relocations (it then defines the `GLIBC_ABI_DT_RELR` version, 2.36+).
fn libc_reads_relr() -> bool {
    let Ok(out) = Command::new("cc")
        .arg("-print-file-name=libc.so.6")
        .output()
    else {
        return false;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // At most a few MiB: the C library itself.
    let Ok(bytes) = std::fs::read(&path) else {
        return false;
    };
    let version = b"GLIBC_ABI_DT_RELR";
    bytes.windows(version.len()).any(|w| w == version)
}

/// Whether this rustc is 1.90 or later (LLD by default on this target).
fn rustc_links_with_lld() -> bool {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let mut parts = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split(['.', '-']);
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(1), Some(m)) if m >= 90) || major.is_some_and(|m| m > 1)
}
