//! The real backend's device layer against a real (or Soft-RoCE) device: every verb, batches
//! with fences, unsignaled batches, concurrent atomics from several queue pairs, emulated masked
//! CAS, a remote access error, and the TCP handshake with its token check.
//!
//! Needs feature `connectx` and an RDMA device. Without one each test says it was skipped,
//! unless `DMKIT_RDMA_REQUIRED=1` (set by `scripts/rxe-test.sh` inside the Soft-RoCE VM), which
//! turns a missing device into a failure. `DMKIT_RDMA_DEVICE` names the device (default: the
//! first).
#![cfg(feature = "connectx")]

use dmkit_rdma::real::device::{BlockingExecutor, Nic, Region};
use dmkit_rdma::real::plan::{NodeRegions, RemoteRegion};
use dmkit_rdma::real::wire::{self, Message, PROTOCOL_VERSION};
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Request, Response, VerbsError};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

const MEMORY: usize = 1 << 20;

fn nic() -> Option<Nic> {
    let name = std::env::var("DMKIT_RDMA_DEVICE").ok();
    match Nic::open(name.as_deref(), 1, None) {
        Ok(nic) => Some(nic),
        Err(e) if std::env::var("DMKIT_RDMA_REQUIRED").is_ok() => panic!("no RDMA device: {e}"),
        Err(e) => {
            eprintln!("skipped: {e} (run scripts/rxe-test.sh for the Soft-RoCE VM)");
            None
        }
    }
}

/// A memory node's region in this process and a client executor whose queue pair is
/// connected to the memory node's queue pair (a loopback pair on one device).
struct Pair {
    memory: Region,
    _memory_mr: Arc<dmkit_rdma::real::device::MemoryRegistration>,
    _server_qp: dmkit_rdma::real::device::RcQp,
    client: BlockingExecutor,
}

fn pair(nic: &Nic, memory: Region, mr: Arc<dmkit_rdma::real::device::MemoryRegistration>, psn: u32) -> Pair {
    let regions = NodeRegions {
        host: RemoteRegion { addr: memory.addr(), rkey: mr.rkey(), len: memory.len() as u64 },
        device: None,
    };
    let mut server = nic.queue_pair(64, psn).unwrap();
    let mut client = nic.queue_pair(64, psn + 1).unwrap();
    let (s, c) = (server.endpoint(nic), client.endpoint(nic));
    server.connect(nic, &c).unwrap();
    client.connect(nic, &s).unwrap();
    let client = BlockingExecutor::new(nic, client, regions, 64 << 10).unwrap();
    Pair { memory, _memory_mr: mr, _server_qp: server, client }
}

fn at(offset: u64) -> RemoteAddr {
    RemoteAddr::host(NodeId(0), offset)
}

fn one(e: &mut BlockingExecutor, r: Request) -> Response {
    e.execute(vec![r], true).unwrap().pop().unwrap()
}

#[test]
fn every_verb_and_batch() {
    let Some(nic) = nic() else { return };
    let memory = Region::new(MEMORY).unwrap();
    let mr = nic.register(&memory, true).unwrap();
    let mut p = pair(&nic, memory, mr, 100);
    let e = &mut p.client;
    eprintln!("device {:?}, inline {} bytes", nic.caps(), e.caps().max_inline_bytes);
    // WRITE (small: inline if the QP grants it; large: from staging), then READ it back.
    let small = vec![0xabu8; 16];
    let large: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
    one(e, Request::write(at(64), small.clone()));
    one(e, Request::write(at(4096), large.clone()));
    assert_eq!(p.memory.read_at(64, 16), small, "the WRITE landed in the memory node's region");
    assert_eq!(one(e, Request::read_len(at(4096), 4000)).into_buf().unwrap().as_slice(), &large[..]);
    // CAS that succeeds, CAS that fails, FAA; each returns the old word.
    assert_eq!(one(e, Request::cas(at(0), 0, 7)).atomic().unwrap(), 0);
    assert_eq!(one(e, Request::cas(at(0), 0, 9)).atomic().unwrap(), 7);
    assert_eq!(one(e, Request::faa(at(0), 5)).atomic().unwrap(), 7);
    assert_eq!(u64::from_le_bytes(p.memory.read_at(0, 8).try_into().unwrap()), 12);
    // A doorbell batch: an RMW and a WRITE are seen by later READs of the same QP; a fenced
    // WRITE after a READ waits for it.
    let r = e
        .execute(
            vec![
                Request::faa(at(8), 1),
                Request::read_len(at(8), 8),
                Request::write(at(16), vec![1u8; 8]),
                Request::read_len(at(16), 8),
                Request::write(at(16), vec![2u8; 8]).fenced(),
            ],
            true,
        )
        .unwrap();
    assert_eq!(r[0].atomic().unwrap(), 0);
    assert_eq!(r[1].clone().into_buf().unwrap().u64_at(0), 1);
    assert_eq!(r[3].clone().into_buf().unwrap().as_slice(), &[1u8; 8]);
    assert_eq!(p.memory.read_at(16, 8), vec![2u8; 8]);
    // An unsignaled batch, then a signalled READ on the same QP sees it.
    assert!(e.execute(vec![Request::write(at(24), vec![3u8; 8])], false).unwrap().is_empty());
    assert_eq!(one(e, Request::read_len(at(24), 8)).into_buf().unwrap().as_slice(), &[3u8; 8]);
    // Emulated masked CAS: compare and swap only the low byte; the whole old word comes back.
    one(e, Request::write(at(32), 0x1100u64.to_le_bytes().to_vec()));
    assert_eq!(one(e, Request::masked_cas(at(32), 0, 0xff, 0x42, 0xff)).atomic().unwrap(), 0x1100);
    assert_eq!(one(e, Request::masked_cas(at(32), 0, 0xff, 0x55, 0xff)).atomic().unwrap(), 0x1142);
    assert_eq!(u64::from_le_bytes(p.memory.read_at(32, 8).try_into().unwrap()), 0x1142);
    // Bad input is refused before anything is posted.
    assert!(matches!(
        e.execute(vec![Request::read_len(at(MEMORY as u64 - 4), 8)], true),
        Err(VerbsError::OutOfRange { .. })
    ));
    assert!(matches!(e.execute(vec![Request::cas(at(4), 0, 1)], true), Err(VerbsError::Unaligned { .. })));
    let _ = Buf::zeroed(1);
}

#[test]
fn concurrent_atomics_from_several_queue_pairs() {
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let memory = Region::new(MEMORY).unwrap();
    let mr = nic.register(&memory, true).unwrap();
    let base = memory.addr();
    let rkey = mr.rkey();
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 300;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let nic = nic.clone();
            std::thread::spawn(move || {
                let regions = NodeRegions { host: RemoteRegion { addr: base, rkey, len: MEMORY as u64 }, device: None };
                let mut server = nic.queue_pair(64, 1000 + 10 * t as u32).unwrap();
                let mut client = nic.queue_pair(64, 1001 + 10 * t as u32).unwrap();
                let (s, c) = (server.endpoint(&nic), client.endpoint(&nic));
                server.connect(&nic, &c).unwrap();
                client.connect(&nic, &s).unwrap();
                let mut e = BlockingExecutor::new(&nic, client, regions, 4096).unwrap();
                let mut won = 0u64;
                for _ in 0..ROUNDS {
                    e.execute(vec![Request::faa(at(0), 1)], true).unwrap();
                    // A CAS increment: retried until it wins, so every round adds exactly one.
                    let mut old = e.execute(vec![Request::read_len(at(8), 8)], true).unwrap()[0]
                        .clone()
                        .into_buf()
                        .unwrap()
                        .u64_at(0);
                    loop {
                        let seen =
                            e.execute(vec![Request::cas(at(8), old, old + 1)], true).unwrap()[0].atomic().unwrap();
                        if seen == old {
                            won += 1;
                            break;
                        }
                        old = seen;
                    }
                }
                drop(server);
                won
            })
        })
        .collect();
    let won: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(won, THREADS * ROUNDS);
    assert_eq!(u64::from_le_bytes(memory.read_at(0, 8).try_into().unwrap()), THREADS * ROUNDS, "FAA lost an increment");
    assert_eq!(u64::from_le_bytes(memory.read_at(8, 8).try_into().unwrap()), THREADS * ROUNDS, "CAS lost an increment");
    drop(mr);
}

#[test]
fn a_bad_rkey_is_a_failed_completion() {
    let Some(nic) = nic() else { return };
    let memory = Region::new(MEMORY).unwrap();
    let mr = nic.register(&memory, true).unwrap();
    let regions = NodeRegions {
        host: RemoteRegion { addr: memory.addr(), rkey: mr.rkey() ^ 0x5a5a, len: MEMORY as u64 },
        device: None,
    };
    let mut server = nic.queue_pair(16, 7).unwrap();
    let mut client = nic.queue_pair(16, 8).unwrap();
    let (s, c) = (server.endpoint(&nic), client.endpoint(&nic));
    server.connect(&nic, &c).unwrap();
    client.connect(&nic, &s).unwrap();
    let mut e = BlockingExecutor::new(&nic, client, regions, 4096).unwrap();
    let err = e.execute(vec![Request::read_len(at(0), 8)], true).unwrap_err();
    assert!(err.to_string().contains("failed with status"), "{err}");
}

/// The control channel over TCP: a node admits a compute node with the cluster's token, hands
/// it its region and queue pair, and the compute node's verbs then reach its memory; a wrong
/// token is refused with the reason.
#[test]
fn the_handshake_connects_and_refuses_a_wrong_token() {
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let node_nic = nic.clone();
    let node = std::thread::spawn(move || {
        let memory = Region::new(MEMORY).unwrap();
        let mr = node_nic.register(&memory, true).unwrap();
        let mut qps = Vec::new();
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let hello = Message::receive(&mut stream).unwrap();
            match wire::admit(&hello, "cluster-token") {
                Ok((_, endpoints)) => {
                    let mut mine = Vec::new();
                    for (i, ep) in endpoints.iter().enumerate() {
                        let mut qp = node_nic.queue_pair(16, 500 + i as u32).unwrap();
                        qp.connect(&node_nic, ep).unwrap();
                        mine.push(qp.endpoint(&node_nic));
                        qps.push(qp);
                    }
                    let welcome = Message::Welcome {
                        node: 0,
                        host: RemoteRegion { addr: memory.addr(), rkey: mr.rkey(), len: memory.len() as u64 },
                        device: None,
                        endpoints: mine,
                    };
                    welcome.send(&mut stream).unwrap();
                    // Wait for the client to finish, then check what it wrote.
                    assert_eq!(Message::receive(&mut stream).unwrap(), Message::Bye);
                    assert_eq!(memory.read_at(128, 5), b"hello".to_vec());
                }
                Err(reason) => Message::Refused { reason }.send(&mut stream).unwrap(),
            }
        }
    });
    // A wrong token first.
    let mut s = TcpStream::connect(addr).unwrap();
    let mut qp = nic.queue_pair(16, 1).unwrap();
    let mine = qp.endpoint(&nic);
    let hello = |token: &str| Message::Hello {
        version: PROTOCOL_VERSION,
        token: token.into(),
        compute_node: 3,
        endpoints: vec![mine],
    };
    hello("wrong").send(&mut s).unwrap();
    assert_eq!(Message::receive(&mut s).unwrap(), Message::Refused { reason: "wrong cluster token".into() });
    // Then the right one.
    let mut s = TcpStream::connect(addr).unwrap();
    hello("cluster-token").send(&mut s).unwrap();
    let Message::Welcome { host, device, endpoints, .. } = Message::receive(&mut s).unwrap() else {
        panic!("not welcomed")
    };
    qp.connect(&nic, &endpoints[0]).unwrap();
    let mut e = BlockingExecutor::new(&nic, qp, NodeRegions { host, device }, 4096).unwrap();
    e.execute(vec![Request::write(at(128), b"hello".to_vec())], true).unwrap();
    Message::Bye.send(&mut s).unwrap();
    node.join().unwrap();
}

/// The async runtime against a node host on another thread: several coroutines of one thread
/// posting batches (with an emulated masked CAS inside one), an unsignaled batch, a dropped
/// future whose verb still lands, and `call`s to the node's chunk allocator, including its
/// errors.
#[test]
fn the_async_runtime_and_calls_reach_a_node_host() {
    use dmkit_rdma::ClientCtx;
    use dmkit_rdma::Verbs;
    use dmkit_rdma::real::node::{NodeHost, allocator_handler, dial};
    use dmkit_rdma::real::runtime::Executor;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let host_nic = nic.clone();
    let host_stop = stop.clone();
    let host = std::thread::spawn(move || {
        let mut host = NodeHost::new(
            host_nic,
            0,
            "127.0.0.1:0".parse().unwrap(),
            MEMORY as u64,
            "tok",
            allocator_handler(NodeId(0), 4096, MEMORY as u64),
        )
        .unwrap();
        addr_tx.send(host.local_addr()).unwrap();
        host.serve(&host_stop).unwrap();
        (host.admitted, host.refused, host.memory().read_at(64, 8))
    });
    let addr = addr_rx.recv().unwrap();
    let cq = nic.completion_queue(4096).unwrap();
    assert!(
        dial(&nic, std::slice::from_ref(&cq), addr, NodeId(0), "bad", 1)
            .unwrap_err()
            .to_string()
            .contains("wrong cluster token")
    );
    let (conns, mut control) = dial(&nic, std::slice::from_ref(&cq), addr, NodeId(0), "tok", 1).unwrap();
    let exec = Executor::new(nic.clone(), cq, conns, NodeId(1), 0, 42, 8 << 20).unwrap();
    const CLIENTS: u32 = 8;
    const ROUNDS: u64 = 50;
    for c in 0..CLIENTS {
        let client = exec.client(c, c);
        exec.spawn(async move {
            for _ in 0..ROUNDS {
                let r = client
                    .post(vec![Request::faa(at(0), 1), Request::read_len(at(0), 8), Request::masked_faa(at(8), 1, 0)])
                    .await
                    .unwrap();
                assert!(r[1].clone().into_buf().unwrap().u64_at(0) > r[0].atomic().unwrap(), "the READ saw the FAA");
                client.yield_now().await;
            }
        });
    }
    let client = exec.client(100, 100);
    let allocated = exec
        .block_on(async move {
            // A dropped future: its WRITE still lands.
            drop(client.write(at(64), Buf::from(vec![9u8; 8])));
            client.post_unsignaled(vec![Request::write(at(72), vec![7u8; 8])]).unwrap();
            let seen = client.read(at(64), Buf::zeroed(16)).await.unwrap();
            assert_eq!(seen.as_slice(), &[[9u8; 8], [7u8; 8]].concat()[..]);
            client.sleep(1_000_000).await;
            // The allocator, by call.
            let a = dmkit_rdma::alloc::alloc(&client, NodeId(0), 4096, 64).await.unwrap();
            let b = dmkit_rdma::alloc::alloc(&client, NodeId(0), 4096, 64).await.unwrap();
            assert_ne!(a, b);
            assert!(a.offset() >= 4096);
            dmkit_rdma::alloc::free(&client, a, 4096).await.unwrap();
            let big = dmkit_rdma::alloc::alloc(&client, NodeId(0), 1 << 30, 64).await;
            assert!(matches!(big, Err(VerbsError::RemoteMemoryExhausted { .. })), "{big:?}");
            let unknown = client.call(NodeId(0), 77, vec![1, 2, 3]).await;
            assert_eq!(unknown, Err(VerbsError::UnknownService { node: NodeId(0), service: 77 }));
            (a, b)
        })
        .unwrap();
    eprintln!("allocated {allocated:?}");
    let probe = exec.client(200, 200);
    let (faa, masked) = exec
        .block_on(async move {
            let r = probe.post(vec![Request::read_len(at(0), 8), Request::read_len(at(8), 8)]).await.unwrap();
            (r[0].clone().into_buf().unwrap().u64_at(0), r[1].clone().into_buf().unwrap().u64_at(0))
        })
        .unwrap();
    assert_eq!(faa, CLIENTS as u64 * ROUNDS, "every FAA counted once");
    assert_eq!(masked, CLIENTS as u64 * ROUNDS, "every emulated masked FAA counted once");
    // A barrier of two compute nodes over their control connections: the second one's wait
    // ends only once the first arrives.
    let arrived = Arc::new(AtomicBool::new(false));
    let (other_nic, other_arrived) = (nic.clone(), arrived.clone());
    let other = std::thread::spawn(move || {
        let cq = other_nic.completion_queue(64).unwrap();
        let (_conns, mut control) = dial(&other_nic, &[cq], addr, NodeId(0), "tok", 2).unwrap();
        dmkit_rdma::real::node::barrier(&mut control, 1, 2).unwrap();
        assert!(other_arrived.load(Ordering::SeqCst), "the barrier let a compute node through alone");
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    arrived.store(true, Ordering::SeqCst);
    dmkit_rdma::real::node::barrier(&mut control, 1, 2).unwrap();
    other.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (admitted, refused, word) = host.join().unwrap();
    assert_eq!((admitted, refused), (2, 1));
    assert_eq!(word, vec![9u8; 8]);
}
