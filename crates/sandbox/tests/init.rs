//! The sandbox's init (privileged: it creates namespaces): it runs the
//! command as its child, keeps none of ustack's other descriptors, delivers
//! signals, exits with the command's status and removes the file it was
//! given when it ends.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ustack_sandbox::{Sandbox, SandboxConfig};

fn args(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn spawn(cmd: &[&str]) -> Sandbox {
    let cfg = SandboxConfig {
        dns: None,
        ..SandboxConfig::default()
    };
    Sandbox::spawn(&cfg, &args(cmd))
        .unwrap_or_else(|e| panic!("spawn failed (this test needs root and /dev/net/tun): {e}"))
}

/// What the descriptors of `pid` point to (above stdio).
fn fd_targets(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .is_some_and(|n| n > 2)
        })
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_init_runs_the_command_keeps_nothing_else_and_delivers_signals() {
    // A descriptor of ours (close-on-exec, like the relay's sockets): the
    // init must not keep it.
    let mut fds = [0; 2];
    // SAFETY: pipe2 with a valid two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the descriptors were just made and are owned by nobody else.
    let (ours_r, ours_w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let ours = std::fs::read_link(format!("/proc/self/fd/{}", ours_r.as_raw_fd()))
        .expect("our pipe")
        .to_string_lossy()
        .into_owned();

    let mut sb = spawn(&["sleep", "30"]);
    let tap = sb.take_tap();
    sb.start().expect("start");
    let init = sb.pid();
    let comm = std::fs::read_to_string(format!("/proc/{init}/comm")).expect("comm");
    assert_eq!(comm.trim(), "ustack-init");
    let kept = fd_targets(init);
    assert!(!kept.contains(&ours), "the init kept our pipe: {kept:?}");
    assert!(
        kept.len() <= 2,
        "the init keeps its socket and the command's pidfd only: {kept:?}"
    );
    // The command is its child.
    let children =
        std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap_or_default();
    let cmd: Vec<u32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(cmd.len(), 1, "{children:?}");
    let t0 = Instant::now();
    loop {
        let c = std::fs::read_to_string(format!("/proc/{}/comm", cmd[0])).unwrap_or_default();
        if c.trim() == "sleep" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no sleep: {c:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A signal through the init; its status is the command's.
    sb.signal(libc::SIGTERM).expect("signal");
    assert_eq!(sb.wait().expect("wait"), 128 + libc::SIGTERM);
    drop(tap);
    drop((ours_r, ours_w));
}

#[test]
fn the_init_removes_the_file_it_was_given_when_the_command_ends() {
    /// Removes the directory when dropped, also when the test panics.
    struct RmDir(std::path::PathBuf);
    impl Drop for RmDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = RmDir(std::env::temp_dir().join(format!("ustack-init-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let file = dir.0.join("control");
    std::fs::write(&file, b"x").expect("write");
    let mut sb = spawn(&["sh", "-c", "exit 6"]);
    let tap = sb.take_tap();
    sb.remove_at_exit(&file).expect("remove_at_exit");
    sb.start().expect("start");
    assert_eq!(sb.wait().expect("wait"), 6);
    assert!(!file.exists(), "the init left {file:?}");
    // Only before the start.
    assert!(sb.remove_at_exit(&file).is_err());
    drop(tap);
}
