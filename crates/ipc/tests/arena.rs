//! The domain arena: allocation limits and errors, vcopy between arena buffers (one
//! memcpy) in one process and across processes (COPY1 and COPY2), mixed arena/private
//! copies, crash reclamation and fork safety.

mod common;
use common::*;
use std::collections::HashMap;
use std::time::Duration;
use ustack_ipc::{Domain, DomainConfig, Error, Message, ANY, ARENA_CHUNK};

fn arena_domain(tag: &str, arena: u64) -> DomGuard {
    let cfg = DomainConfig {
        max_endpoints: 8,
        arena_size: arena,
        ..DomainConfig::default()
    };
    DomGuard(Domain::create(&unique(tag), cfg).expect("create domain"))
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn sum(b: &[u8]) -> u64 {
    b.iter()
        .enumerate()
        .map(|(i, &x)| (i as u64 % 251 + 1) * x as u64)
        .sum()
}

#[test]
fn alloc_limits_errors_and_accounting() {
    let d = arena_domain("ar-alloc", 1 << 20); // 16 chunks
    assert_eq!(d.arena_size(), 1 << 20);
    assert_eq!(d.arena_used(), 0);
    assert_eq!(d.alloc(0).unwrap_err(), Error::InvalidArgument);
    assert_eq!(d.alloc((1 << 20) + 1).unwrap_err(), Error::TooLarge);
    let a = d.alloc(1).unwrap();
    assert_eq!((a.len(), a.capacity()), (1, ARENA_CHUNK));
    let b = d.alloc(3 * ARENA_CHUNK + 5).unwrap();
    assert_eq!(b.capacity(), 4 * ARENA_CHUNK);
    assert_eq!(d.arena_used(), 5 * ARENA_CHUNK);
    // Buffers never overlap.
    let (a0, a1) = (a.addr(), a.addr() + a.capacity());
    let (b0, b1) = (b.addr(), b.addr() + b.capacity());
    assert!(a1 <= b0 || b1 <= a0);
    // 11 chunks left: 12 do not fit, 11 do, then nothing does.
    assert_eq!(d.alloc(12 * ARENA_CHUNK).unwrap_err(), Error::ArenaFull);
    let c = d.alloc(11 * ARENA_CHUNK).unwrap();
    assert_eq!(d.alloc(1).unwrap_err(), Error::ArenaFull);
    assert_eq!(d.info().arena_used, 16 * ARENA_CHUNK as u64);
    drop(b);
    // The hole left by b (4 chunks) is reused; 5 chunks do not fit in it.
    assert_eq!(d.alloc(5 * ARENA_CHUNK).unwrap_err(), Error::ArenaFull);
    let b2 = d.alloc(4 * ARENA_CHUNK).unwrap();
    assert_eq!(b2.addr(), b0);
    drop((a, b2, c));
    assert_eq!(d.arena_used(), 0);
    // The whole arena in one buffer.
    let all = d.alloc(1 << 20).unwrap();
    assert_eq!(all.capacity(), 1 << 20);
    drop(all);
    // Ended domain.
    d.end().unwrap();
    assert_eq!(d.alloc(1).unwrap_err(), Error::DomainEnded);
}

#[test]
fn buffer_accessors_check_bounds_and_freed_memory_is_zeroed() {
    let d = arena_domain("ar-acc", 1 << 20);
    let mut a = d.alloc(100).unwrap();
    a.write_at(0, b"abc").unwrap();
    a.write_at(ARENA_CHUNK - 3, b"xyz").unwrap();
    assert_eq!(a.write_at(ARENA_CHUNK - 2, b"xyz"), Err(Error::BadAddress));
    assert_eq!(a.write_at(usize::MAX, b"x"), Err(Error::BadAddress));
    assert_eq!(a.fill(1, ARENA_CHUNK, 0), Err(Error::BadAddress));
    let mut out = [0u8; 3];
    a.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"abc");
    assert_eq!(a.read_at(ARENA_CHUNK - 1, &mut out), Err(Error::BadAddress));
    // SAFETY: nothing else writes this buffer while the slice lives.
    assert_eq!(unsafe { a.as_slice() }.len(), 100);
    let addr = a.addr();
    drop(a);
    // The same chunk again: its old bytes are gone (pages returned to the system).
    let b = d.alloc(10).unwrap();
    assert_eq!(b.addr(), addr);
    b.read_at(0, &mut out).unwrap();
    assert_eq!(out, [0, 0, 0]);
}

#[test]
fn vcopy_between_arena_buffers_in_one_process() {
    let d = arena_domain("ar-vc1", 16 << 20);
    let mut a = d.bind("a").unwrap();
    let b = d.bind("b").unwrap();
    let c = d.bind("c").unwrap();
    let size = 3 << 20;
    let data = pattern(size, 7);
    let mut src = d.alloc(size).unwrap();
    src.write_at(0, &data).unwrap();
    let dst = d.alloc(size).unwrap();
    // COPY1 (caller is the source) into b's buffer.
    a.vcopy(a.id(), src.addr(), b.id(), dst.addr(), size)
        .unwrap();
    let mut out = vec![0u8; size];
    dst.read_at(0, &mut out).unwrap();
    assert!(out == data);
    // COPY2: a asks for a copy from b to c, at an odd offset and length.
    let dst2 = d.alloc(size).unwrap();
    a.vcopy(b.id(), dst.addr() + 3, c.id(), dst2.addr() + 1, size - 10)
        .unwrap();
    let mut out2 = vec![0u8; size - 10];
    dst2.read_at(1, &mut out2).unwrap();
    assert!(out2[..] == data[3..size - 7]);
    // Overlapping ranges in one buffer behave like memmove.
    a.vcopy(b.id(), dst.addr(), b.id(), dst.addr() + 1, 1000)
        .unwrap();
    let mut o = vec![0u8; 1001];
    dst.read_at(0, &mut o).unwrap();
    assert_eq!(o[0], data[0]);
    assert!(o[1..] == data[..1000]);
    // Counters count arena copies too.
    let me = d
        .info()
        .endpoints
        .into_iter()
        .find(|e| e.endpoint == a.id())
        .unwrap();
    assert_eq!(me.copies, 3);
    assert_eq!(me.copied_bytes, (size + size - 10 + 1000) as u64);
}

#[test]
fn vcopy_mixing_arena_and_private_memory_and_bad_ranges() {
    let d = arena_domain("ar-mix", 4 << 20);
    let mut a = d.bind("a").unwrap();
    let b = d.bind("b").unwrap();
    let size = 1 << 20;
    let data = pattern(size, 3);
    let dst = d.alloc(size).unwrap();
    // Private source, arena destination: the kernel path, same result.
    a.vcopy(a.id(), data.as_ptr() as usize, b.id(), dst.addr(), size)
        .unwrap();
    let mut out = vec![0u8; size];
    dst.read_at(0, &mut out).unwrap();
    assert!(out == data);
    // Arena source, private destination.
    let mut back = vec![0u8; size];
    a.vcopy(b.id(), dst.addr(), a.id(), back.as_mut_ptr() as usize, size)
        .unwrap();
    assert!(back == data);
    // Wild addresses are errors, never crashes.
    assert_eq!(
        a.vcopy(b.id(), 4096, a.id(), back.as_mut_ptr() as usize, 100),
        Err(Error::BadAddress)
    );
    assert_eq!(
        a.vcopy(b.id(), usize::MAX - 10, b.id(), dst.addr(), 100),
        Err(Error::BadAddress)
    );
}

#[test]
fn domain_without_arena() {
    let d = arena_domain("ar-none", 0);
    assert_eq!(d.arena_size(), 0);
    assert_eq!(d.alloc(1).unwrap_err(), Error::TooLarge);
    let mut a = d.bind("a").unwrap();
    let b = d.bind("b").unwrap();
    let src = pattern(10_000, 1);
    let mut dst = vec![0u8; 10_000];
    a.vcopy(
        a.id(),
        src.as_ptr() as usize,
        b.id(),
        dst.as_mut_ptr() as usize,
        10_000,
    )
    .unwrap();
    assert!(dst == src);
    assert_eq!(
        Domain::create(
            &unique("ar-huge"),
            DomainConfig {
                arena_size: ustack_ipc::MAX_ARENA_SIZE + 1,
                ..DomainConfig::default()
            }
        )
        .unwrap_err(),
        Error::InvalidArgument
    );
}

/// Children allocate arena buffers and report their addresses (in their own processes);
/// the parent copies into them (COPY1), between them (COPY2) and back, then checks the
/// children's view of the bytes. A second `Domain::open` in each child maps the arena at
/// an address of its own, so addresses really are translated between processes.
#[test]
fn vcopy_arena_across_processes_copy1_and_copy2() {
    let d = arena_domain("ar-mp", 32 << 20);
    let size = 4usize << 20;
    let name = d.name().to_string();
    let spawn = |slot: i32| {
        let name = name.clone();
        ChildGuard(fork_child(move || {
            let Ok(dom) = Domain::open(&name) else {
                return 2;
            };
            let Ok(mut e) = dom.bind_as(slot, "holder") else {
                return 3;
            };
            let Ok(buf) = dom.alloc(size) else { return 4 };
            if e.send(0, &Message::new(1).with_u64(0, buf.addr() as u64))
                .is_err()
            {
                return 5;
            }
            loop {
                let Ok(_) = e.receive(0) else { return 0 };
                let mut v = vec![0u8; size];
                if buf.read_at(0, &mut v).is_err() {
                    return 6;
                }
                if e.send(0, &Message::new(2).with_u64(0, sum(&v))).is_err() {
                    return 7;
                }
            }
        }))
    };
    let mut me = d.bind_as(0, "parent").unwrap();
    let c1 = spawn(1);
    let c2 = spawn(2);
    let mut addr = HashMap::new();
    for _ in 0..2 {
        let m = me.receive_timeout(ANY, Duration::from_secs(10)).unwrap();
        addr.insert(m.source, m.u64_at(0) as usize);
    }
    let (e1, e2) = (d.endpoint_of_slot(1), d.endpoint_of_slot(2));
    let (a1, a2) = (addr[&e1], addr[&e2]);
    let data = pattern(size, 9);
    let want = sum(&data);
    let mut src = d.alloc(size).unwrap();
    src.write_at(0, &data).unwrap();
    let check = |me: &mut ustack_ipc::Endpoint, ep: i32| {
        me.sendrec_timeout(ep, &Message::new(9), Duration::from_secs(10))
            .unwrap()
            .u64_at(0)
    };
    assert_ne!(check(&mut me, e1), want);
    me.vcopy(me.id(), src.addr(), e1, a1, size).unwrap();
    assert_eq!(check(&mut me, e1), want);
    me.vcopy(e1, a1, e2, a2, size).unwrap();
    assert_eq!(check(&mut me, e2), want);
    let back = d.alloc(size).unwrap();
    me.vcopy(e2, a2, me.id(), back.addr(), size).unwrap();
    let mut v = vec![0u8; size];
    back.read_at(0, &mut v).unwrap();
    assert!(v == data);
    // The children's buffers count as used; when a child is killed they are reclaimed.
    assert_eq!(d.arena_used(), 4 * size);
    drop(c1);
    drop(c2);
    assert_eq!(
        me.vcopy(e1, a1, me.id(), back.addr(), 10),
        Err(Error::DeadEndpoint)
    );
    d.reclaim_dead();
    assert_eq!(d.arena_used(), 2 * size);
}

/// A forked child that drops a buffer it inherited does not free the parent's buffer;
/// buffers of a child that exits without freeing are reclaimed when the arena is full.
#[test]
fn fork_inherited_buffers_and_full_arena_reclaim() {
    let d = arena_domain("ar-fork", 1 << 20);
    let mut mine = d.alloc(ARENA_CHUNK).unwrap();
    mine.write_at(0, b"parent").unwrap();
    let dc = d.0.clone();
    let inherited = &mine;
    let pid = fork_child(move || {
        // SAFETY: in the child, `inherited` points at the child's own copy of the parent's
        // handle; taking it by value once and dropping it is what a child that lets an
        // inherited handle go out of scope does.
        drop(unsafe { std::ptr::read(inherited) });
        // Take the rest of the arena and exit without freeing it.
        match dc.alloc(15 * ARENA_CHUNK) {
            Ok(b) => {
                std::mem::forget(b);
                0
            }
            Err(_) => 2,
        }
    });
    assert_eq!(wait_child(pid, Duration::from_secs(10)), 0);
    assert_eq!(
        d.arena_used(),
        16 * ARENA_CHUNK,
        "the child freed the parent's chunk"
    );
    // Full: the next allocation reclaims the dead child's 15 chunks.
    let b = d.alloc(2 * ARENA_CHUNK).unwrap();
    assert_eq!(d.arena_used(), 3 * ARENA_CHUNK);
    let mut out = [0u8; 6];
    mine.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"parent");
    drop(b);
}
