//! `TapFd` shares its frame I/O with `ustack_dev::tap` but drops frames while
//! the guest's interface is down, where `Tap` reports an error. Runs as root in
//! a network namespace of its own (a dedicated thread), so nothing on the host
//! is touched.

use std::io;

use ustack_dev::Device;
use ustack_sandbox::attach::open_tap;

#[test]
fn frames_to_a_down_interface_are_dropped_not_errors() {
    std::thread::spawn(|| {
        // SAFETY: unshare only changes this thread's network namespace.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare (need root): {}", io::Error::last_os_error());
        let name = format!("ustk-f{}", std::process::id());
        // attach opens TAPs that exist; it creates none.
        let missing = format!("ustk-m{}", std::process::id());
        let err = open_tap(&missing, false).expect_err("a missing TAP opened");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("ip tuntap add"), "{err}");
        assert_eq!(index_of(&missing), 0, "{missing} was created");
        // (`ip` runs in this thread's namespace: a child starts in it.)
        let made = std::process::Command::new("ip")
            .args(["tuntap", "add", "dev", &name, "mode", "tap"])
            .status()
            .expect("run ip");
        assert!(made.success(), "ip tuntap add: {made}");
        let mut tap = open_tap(&name, false).expect("open TAP");
        assert_eq!(tap.name(), name);
        // Never brought up, the interface is down: the kernel answers EIO,
        // which TapFd treats as a frame lost on the wire.
        tap.send(&[0xffu8; 60]).expect("send while down is Ok");
        assert_eq!(tap.recv(&mut [0u8; 2048]).expect("recv"), None);
        // Other errors still surface: an empty write is EINVAL.
        assert!(tap.send(&[]).is_err(), "an empty frame must be an error");
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p));
}

/// The interface index of `name` in the calling thread's namespace (0: none).
fn index_of(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: `c` is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}
