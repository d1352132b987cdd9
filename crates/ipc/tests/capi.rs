//! Builds the C example against the shared and the static library and runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Directory holding libustack_ipc.{so,a}: `cargo test` only builds the rlib of the
/// library for the tests, so build the cdylib/staticlib with the cargo that runs us, in a
/// target dir of its own under ours (this test binary lives in `<target>/<profile>/deps/`).
/// Not in ours: a crate with cdylib/staticlib types has no hash in its file names, so a
/// `cargo build -p ustack-ipc` there would rebuild `deps/libustack_ipc.rlib` in place, with
/// this package's features alone, under the crates already built against it (a later
/// doc-test of one of them then fails to find its dependencies).
fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("current exe");
            let target = exe.ancestors().nth(3).expect("target dir").join("ipc-capi");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
            let st = Command::new(cargo)
                .args([
                    "build",
                    "-q",
                    "-p",
                    "ustack-ipc",
                    "--lib",
                    "--manifest-path",
                ])
                .arg(&manifest)
                .env("CARGO_TARGET_DIR", &target)
                .status()
                .expect("run cargo");
            assert!(st.success(), "cargo build of the C libraries failed");
            let dir = target.join("debug");
            assert!(dir.join("libustack_ipc.so").exists() && dir.join("libustack_ipc.a").exists());
            dir
        })
        .clone()
}

fn compile_and_run(kind: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pingpong-{kind}"));
    let mut cc = Command::new("cc");
    cc.arg("-O2")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(root.join("include"));
    cc.arg(root.join("examples/c/pingpong.c"))
        .arg("-o")
        .arg(&out);
    if kind == "static" {
        cc.arg(lib.join("libustack_ipc.a"))
            .args(["-lpthread", "-ldl", "-lm", "-lrt"]);
    } else {
        cc.arg("-L")
            .arg(&lib)
            .arg("-lustack_ipc")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    }
    let st = cc.status().expect("run cc");
    assert!(st.success(), "cc failed for {kind}");
    let name = format!("c-{kind}-{}", std::process::id());
    // cargo test puts its own target directories first in LD_LIBRARY_PATH, which the
    // loader searches before the binary's run path: a libustack_ipc.so from another build
    // there (an older release build, say) would be loaded instead of the one just built.
    let o = Command::new(&out)
        .arg(&name)
        .arg("20000")
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{kind}: {stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("round trips/s")
            && stdout.contains("vcopy of 65536 bytes verified (private and arena buffers)")
            && stdout.ends_with("ok\n"),
        "{stdout}"
    );
}

#[test]
fn c_example_with_shared_library() {
    compile_and_run("shared");
}

#[test]
fn c_example_with_static_library() {
    compile_and_run("static");
}
