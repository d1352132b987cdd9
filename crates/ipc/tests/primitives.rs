//! In-process (multi-thread) tests of every primitive and every error.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ustack_ipc::{Domain, DomainConfig, Error, Message, MsgKind, WaitMode, ANY};

#[test]
fn send_is_a_rendezvous_and_source_is_filled_in() {
    let d = domain("rdv", 8);
    let mut a = d.bind("a").unwrap();
    let mut b = d.bind("b").unwrap();
    let (aid, bid) = (a.id(), b.id());
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    let t = std::thread::spawn(move || {
        let mut m = Message::new(5).with_u64(0, 77);
        m.source = 12345; // forged: must be overwritten
        m.kind = 99;
        a.send(bid, &m).unwrap();
        done2.store(true, Ordering::SeqCst);
        a
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !done.load(Ordering::SeqCst),
        "send returned before the receiver received"
    );
    let m = b.receive(ANY).unwrap();
    assert_eq!(m.source, aid);
    assert_eq!(m.kind(), MsgKind::Send);
    assert_eq!(m.mtype, 5);
    assert_eq!(m.u64_at(0), 77);
    let _a = t.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
}

#[test]
fn receive_from_specific_source_leaves_others_blocked() {
    let d = domain("filter", 8);
    let mut r = d.bind("r").unwrap();
    let rid = r.id();
    let mut s1 = d.bind("s1").unwrap();
    let mut s2 = d.bind("s2").unwrap();
    let (id1, id2) = (s1.id(), s2.id());
    let t1 = std::thread::spawn(move || s1.send(rid, &Message::new(1)));
    let t2 = std::thread::spawn(move || s2.send(rid, &Message::new(2)));
    std::thread::sleep(Duration::from_millis(30));
    let m = r.receive(id2).unwrap();
    assert_eq!((m.source, m.mtype), (id2, 2));
    assert_eq!(t2.join().unwrap(), Ok(()));
    assert!(!t1.is_finished());
    let m = r.receive(ANY).unwrap();
    assert_eq!((m.source, m.mtype), (id1, 1));
    assert_eq!(t1.join().unwrap(), Ok(()));
}

#[test]
fn sendrec_round_trip_and_nonblocking_reply() {
    let d = domain("sendrec", 8);
    let mut srv = d.bind("srv").unwrap();
    let sid = srv.id();
    let d2 = d.0.clone();
    let t = std::thread::spawn(move || {
        let mut c = d2.bind("client").unwrap();
        let mut sum = 0;
        for i in 0..1000u64 {
            let r = c.sendrec(sid, &Message::new(1).with_u64(0, i)).unwrap();
            assert_eq!(r.source, sid);
            assert_eq!(r.u64_at(0), i * 2);
            sum += r.u64_at(0);
        }
        sum
    });
    for _ in 0..1000 {
        let m = srv.receive(ANY).unwrap();
        assert_eq!(m.kind(), MsgKind::SendRec);
        // The client is already receiving: a non-blocking reply must succeed.
        srv.try_send(m.source, &Message::new(2).with_u64(0, m.u64_at(0) * 2))
            .unwrap();
    }
    assert_eq!(t.join().unwrap(), (0..1000u64).map(|i| i * 2).sum::<u64>());
}

#[test]
fn notify_coalesces_and_comes_first_but_not_in_sendrec() {
    let d = domain("notify", 8);
    let mut a = d.bind("a").unwrap();
    let mut b = d.bind("b").unwrap();
    let mut c = d.bind("c").unwrap();
    let (aid, bid, cid) = (a.id(), b.id(), c.id());
    for _ in 0..5 {
        a.notify(bid).unwrap();
    }
    c.notify(bid).unwrap();
    let mut got = vec![];
    for _ in 0..2 {
        let m = b.receive(ANY).unwrap();
        assert!(m.is_notify());
        got.push(m.source);
    }
    got.sort();
    assert_eq!(got, vec![aid, cid]);
    assert_eq!(
        b.try_receive(ANY),
        Err(Error::WouldBlock),
        "5 notifies coalesce into one"
    );

    // A pending notification is delivered before a blocked sender's message.
    let t = std::thread::spawn(move || {
        a.send(bid, &Message::new(9)).unwrap();
        a
    });
    assert!(eventually(Duration::from_secs(2), || d
        .info()
        .endpoints
        .iter()
        .any(|e| e.state.starts_with("sending to"))));
    c.notify(bid).unwrap();
    let m = b.receive(ANY).unwrap();
    assert!(m.is_notify() && m.source == cid);
    let m = b.receive(ANY).unwrap();
    assert_eq!((m.mtype, m.source), (9, aid));
    let mut a = t.join().unwrap();

    // sendrec does not consume a notification from its peer; it stays pending.
    let t = std::thread::spawn(move || {
        let m = b.receive(ANY).unwrap();
        b.notify(m.source).unwrap();
        b.send(m.source, &Message::new(3)).unwrap();
        b
    });
    let r = a.sendrec(bid, &Message::new(1)).unwrap();
    assert_eq!((r.mtype, r.is_notify()), (3, false));
    let _b = t.join().unwrap();
    let n = a.try_receive(bid).unwrap();
    assert!(n.is_notify());
}

#[test]
fn nonblocking_and_timeouts() {
    let d = domain("nb", 8);
    let mut a = d.bind("a").unwrap();
    let b = d.bind("b").unwrap();
    let bid = b.id();
    assert_eq!(a.try_send(bid, &Message::new(1)), Err(Error::WouldBlock));
    assert_eq!(a.try_receive(ANY), Err(Error::WouldBlock));
    assert_eq!(a.try_receive(bid), Err(Error::WouldBlock));
    assert_eq!(a.try_sendrec(bid, &Message::new(1)), Err(Error::WouldBlock));
    for mode in [WaitMode::Adaptive, WaitMode::Spin, WaitMode::Block] {
        a.set_wait_mode(mode);
        let t0 = Instant::now();
        assert_eq!(
            a.send_timeout(bid, &Message::new(1), Duration::from_millis(30)),
            Err(Error::TimedOut)
        );
        assert_eq!(
            a.receive_timeout(ANY, Duration::from_millis(30)),
            Err(Error::TimedOut)
        );
        assert_eq!(
            a.sendrec_timeout(bid, &Message::new(1), Duration::from_millis(30)),
            Err(Error::TimedOut)
        );
        let el = t0.elapsed();
        assert!(
            el >= Duration::from_millis(90) && el < Duration::from_millis(1500),
            "{mode:?}: {el:?}"
        );
    }
    // A timed-out send left nothing behind: b sees no message.
    let mut b = b;
    assert_eq!(b.try_receive(ANY), Err(Error::WouldBlock));
    assert!(
        d.info().endpoints.iter().all(|e| e.state == "running"),
        "{:?}",
        d.info()
    );
}

#[test]
fn sendrec_timeout_after_request_was_taken() {
    let d = domain("srto", 8);
    let mut a = d.bind("a").unwrap();
    let mut b = d.bind("b").unwrap();
    let bid = b.id();
    let t = std::thread::spawn(move || {
        let r = a.sendrec_timeout(bid, &Message::new(1), Duration::from_millis(50));
        (a, r)
    });
    let m = b.receive(ANY).unwrap();
    let (mut a, r) = t.join().unwrap();
    assert_eq!(r, Err(Error::TimedOut));
    // The late reply no longer finds `a` waiting.
    assert_eq!(
        b.try_send(m.source, &Message::new(2)),
        Err(Error::WouldBlock)
    );
    assert_eq!(a.try_receive(ANY), Err(Error::WouldBlock));
}

#[test]
fn bad_endpoints() {
    let d = domain("badep", 4);
    let mut a = d.bind("a").unwrap();
    let me = a.id();
    let m = Message::new(0);
    assert_eq!(a.send(me, &m), Err(Error::BadEndpoint), "send to self");
    assert_eq!(a.send(-5, &m), Err(Error::BadEndpoint));
    assert_eq!(
        a.send(d.endpoint_of_slot(3), &m),
        Err(Error::BadEndpoint),
        "unbound slot"
    );
    assert_eq!(
        a.send(d.endpoint_of_slot(100), &m),
        Err(Error::BadEndpoint),
        "out of range"
    );
    assert_eq!(a.receive(d.endpoint_of_slot(2)), Err(Error::BadEndpoint));
    assert_eq!(a.notify(d.endpoint_of_slot(2)), Err(Error::BadEndpoint));
    assert_eq!(
        a.vcopy(d.endpoint_of_slot(2), 0, me, 0, 1),
        Err(Error::BadEndpoint)
    );
    assert!(matches!(d.bind_as(9, "x"), Err(Error::BadEndpoint)));
    // Bare slot numbers (tag 0) address the own domain.
    let b = d.bind_as(2, "b").unwrap();
    assert_eq!(b.id(), d.endpoint_of_slot(2));
    assert!(matches!(d.bind_as(2, "again"), Err(Error::EndpointInUse)));
    a.notify(2).unwrap();
    let _c = d.bind("c").unwrap();
    let _e = d.bind("e").unwrap();
    assert!(matches!(d.bind("full"), Err(Error::DomainFull)));
}

#[test]
fn isolation_between_domains() {
    let da = domain("isoA", 4);
    let db = domain("isoB", 4);
    assert_ne!(da.tag(), db.tag());
    let mut a = da.bind("a").unwrap();
    let mut b = db.bind("b").unwrap();
    let bid = b.id();
    let m = Message::new(1);
    let buf = [1u8; 16];
    assert_eq!(a.send(bid, &m), Err(Error::NotSameDomain));
    assert_eq!(a.try_send(bid, &m), Err(Error::NotSameDomain));
    assert_eq!(a.sendrec(bid, &m), Err(Error::NotSameDomain));
    assert_eq!(a.receive(bid), Err(Error::NotSameDomain));
    assert_eq!(a.notify(bid), Err(Error::NotSameDomain));
    let p = buf.as_ptr() as usize;
    assert_eq!(a.vcopy(a.id(), p, bid, p, 16), Err(Error::NotSameDomain));
    assert_eq!(a.vcopy(bid, p, a.id(), p, 16), Err(Error::NotSameDomain));
    assert_eq!(b.notify(a.id()), Err(Error::NotSameDomain));
    assert_eq!(b.try_receive(ANY), Err(Error::WouldBlock));
}

#[test]
fn ending_a_domain_fails_blocked_and_later_calls() {
    let d = domain("end", 8);
    let mut threads = vec![];
    let mut ids = vec![];
    for i in 0..3 {
        let mut e = d.bind("w").unwrap();
        ids.push(e.id());
        let peer = if i == 0 { None } else { Some(ids[0]) };
        threads.push(std::thread::spawn(move || match (i, peer) {
            (0, _) => e.receive(ANY).map(|_| ()),
            (1, Some(p)) => e.receive(p).map(|_| ()),
            (_, Some(_)) => {
                let mut x = e;
                x.set_wait_mode(WaitMode::Spin);
                x.receive(ANY).map(|_| ())
            }
            _ => unreachable!(),
        }));
    }
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    d.end().unwrap();
    for t in threads {
        assert_eq!(t.join().unwrap(), Err(Error::DomainEnded));
    }
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    assert!(matches!(d.bind("late"), Err(Error::DomainEnded)));
    assert!(matches!(Domain::open(d.name()), Err(Error::NoSuchDomain)));
    // The name can be used again at once.
    let d2 = DomGuard(Domain::create(d.name(), DomainConfig::default()).unwrap());
    assert!(!d2.is_ended());
}

#[test]
fn unbind_wakes_blocked_peers_with_dead_endpoint() {
    let d = domain("unbind", 8);
    let mut a = d.bind("a").unwrap();
    let bid = d.endpoint_of_slot(5);
    for mode in [WaitMode::Adaptive, WaitMode::Block, WaitMode::Spin] {
        a.set_wait_mode(mode);
        let b = d.bind_as(bid, "b").unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let t0 = Instant::now();
            b.unbind();
            t0
        });
        assert_eq!(a.send(bid, &Message::new(1)), Err(Error::DeadEndpoint));
        let t0 = t.join().unwrap();
        assert!(
            t0.elapsed() < Duration::from_millis(50),
            "{mode:?} {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn vcopy_copy1_in_both_directions_and_errors() {
    let d = DomGuard(
        Domain::create(
            &unique("vcopy"),
            DomainConfig {
                max_endpoints: 4,
                max_copy: 8 << 20,
                ..DomainConfig::default()
            },
        )
        .unwrap(),
    );
    let mut a = d.bind("a").unwrap();
    let b = d.bind("b").unwrap();
    let (aid, bid) = (a.id(), b.id());
    let src: Vec<u8> = (0..(4usize << 20)).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; 4 << 20];
    a.vcopy(
        aid,
        src.as_ptr() as usize,
        bid,
        dst.as_mut_ptr() as usize,
        src.len(),
    )
    .unwrap();
    assert!(src == dst);
    let mut dst2 = vec![0u8; 1000];
    a.vcopy(
        bid,
        src.as_ptr() as usize + 5,
        aid,
        dst2.as_mut_ptr() as usize,
        1000,
    )
    .unwrap();
    assert_eq!(&dst2[..], &src[5..1005]);
    a.vcopy(aid, 1, bid, 1, 0).unwrap();
    let p = dst.as_mut_ptr() as usize;
    assert_eq!(a.vcopy(aid, 16, bid, p, 100), Err(Error::BadAddress));
    assert_eq!(a.vcopy(aid, p, bid, 16, 100), Err(Error::BadAddress));
    assert_eq!(
        a.vcopy(aid, usize::MAX - 10, bid, p, 100),
        Err(Error::BadAddress)
    );
    // Writing into read-only memory (the text of this program) is refused, not a crash.
    let ro = vcopy_copy1_in_both_directions_and_errors as fn() as usize;
    assert_eq!(a.vcopy(aid, p, bid, ro, 64), Err(Error::BadAddress));
    assert_eq!(a.vcopy(aid, p, bid, p, (8 << 20) + 1), Err(Error::TooLarge));
    let info = d.info();
    let me = info.endpoints.iter().find(|e| e.endpoint == aid).unwrap();
    assert_eq!(me.copies, 2, "failed and empty copies are not counted");
    assert_eq!(me.copied_bytes, (4 << 20) + 1000);
}

#[test]
fn specific_endpoint_threads_of_their_own_and_introspection() {
    let d = domain("intro", 16);
    let mut srv = d.bind_as(7, "server").unwrap();
    assert_eq!(srv.slot(), 7);
    let sid = srv.id();
    let d2 = d.0.clone();
    let t = std::thread::spawn(move || {
        let mut c = d2.bind("client").unwrap();
        c.send(sid, &Message::new(1)).unwrap();
        c.notify(sid).unwrap();
        c.receive(sid).map(|m| m.mtype)
    });
    let m = srv.receive(ANY).unwrap();
    let cid = m.source;
    assert!(eventually(Duration::from_secs(2), || {
        let i = d.info();
        let c = i.endpoints.iter().find(|e| e.endpoint == cid).cloned();
        let s = i.endpoints.iter().find(|e| e.endpoint == sid).cloned();
        matches!((c, s), (Some(c), Some(s)) if c.state == format!("receiving from {sid}") && s.pending_notify == vec![cid])
    }));
    let i = d.info();
    let s = i.endpoints.iter().find(|e| e.endpoint == sid).unwrap();
    assert_eq!(
        (s.name.as_str(), s.received, s.pid),
        ("server", 1, std::process::id())
    );
    let c = i.endpoints.iter().find(|e| e.endpoint == cid).unwrap();
    assert_ne!(c.tid, s.tid, "each thread holds its own endpoint");
    assert_eq!((c.sent, c.notify_sent), (1, 1));
    srv.send(cid, &Message::new(4)).unwrap();
    assert_eq!(t.join().unwrap(), Ok(4));
    assert!(srv.receive(ANY).unwrap().is_notify());
}

#[test]
fn create_replaces_stale_and_open_or_create() {
    let name = unique("stale");
    let d = Domain::create(&name, DomainConfig::default()).unwrap();
    let e = d.bind("x").unwrap();
    assert!(matches!(
        Domain::create(&name, DomainConfig::default()),
        Err(Error::DomainExists)
    ));
    let same = Domain::open_or_create(&name, DomainConfig::default()).unwrap();
    assert_eq!(same.tag(), d.tag());
    drop(e);
    // No live endpoint any more: create replaces it, the old one is ended.
    let d2 = DomGuard(Domain::create(&name, DomainConfig::default()).unwrap());
    assert!(d.is_ended());
    assert!(!d2.is_ended());
    assert!(matches!(
        Domain::create("bad/name", DomainConfig::default()),
        Err(Error::InvalidArgument)
    ));
    assert!(matches!(
        Domain::create(
            &unique("zero"),
            DomainConfig {
                max_endpoints: 0,
                ..DomainConfig::default()
            }
        ),
        Err(Error::InvalidArgument)
    ));
    assert!(Domain::list().contains(&name));
}

#[test]
fn a_rebound_slot_does_not_get_its_predecessors_messages() {
    let d = domain("rebind", 8);
    let mut a = d.bind("a").unwrap();
    let b1 = d.bind_as(5, "b1").unwrap();
    let bid = b1.id();
    let t = std::thread::spawn(move || a.send(bid, &Message::new(1)));
    assert!(eventually(Duration::from_secs(2), || d
        .info()
        .endpoints
        .iter()
        .any(|e| e.state == format!("sending to {bid}"))));
    drop(b1);
    let mut b2 = d.bind_as(5, "b2").unwrap();
    assert_eq!(b2.id(), bid, "same endpoint number, new generation");
    assert_eq!(b2.try_receive(ANY), Err(Error::WouldBlock));
    assert_eq!(t.join().unwrap(), Err(Error::DeadEndpoint));
    assert_eq!(b2.try_receive(ANY), Err(Error::WouldBlock));
}
