//! The real backend's device layer against a real (or Soft-RoCE) device: every verb, batches
//! with fences, unsignaled batches, concurrent atomics from several queue pairs, emulated masked
//! CAS, a remote access error, the TCP handshake with its token check, the async runtime with
//! calls to a memory node's allocator, and a server node hosting async services (deferred
//! replies answered by a worker, more calls than RPC threads and credits, local CAS/FAA seen by
//! remote READs, a worker's verbs and calls to another node).
//!
//! `a_server_node_process_answers_calls` is the client half of the end-to-end test
//! (`scripts/rxe-e2e.sh`): it runs only when `DMKIT_SERVER_NODE` names a `dmkit server-node`
//! process started with `--echo-service`.
//!
//! `device_memory_and_masked_atomics_as_the_nic_has_them` checks what the NIC reports: on
//! Soft-RoCE no device memory (a node serves none, and a region-1 verb is refused as out of
//! range before it is posted) and emulated masked atomics; on a NIC with device memory, region
//! 1 served by a node, zeroed, and reached by every verb (that half has never run: these
//! machines have no ConnectX).
//!
//! Needs feature `connectx` and an RDMA device. Without one each test says it was skipped,
//! unless `DMKIT_RDMA_REQUIRED=1` (set by `scripts/rxe-test.sh` inside the Soft-RoCE VM), which
//! turns a missing device into a failure. `DMKIT_RDMA_DEVICE` names the device (default: the
//! first). With feature `mlx5-masked`, `DMKIT_RDMA_EXTENDED_QP=1` makes every queue pair one of
//! the extended work-request API (`Nic::use_extended_queue_pairs`), the path native masked
//! atomics take on ConnectX, so Soft-RoCE runs it (without the raw WQEs).
#![cfg(feature = "connectx")]

use dmkit_rdma::alloc::ALLOCATOR_SERVICE;
use dmkit_rdma::real::device::{BlockingExecutor, Nic, Region};
use dmkit_rdma::real::plan::{NodeRegions, RemoteRegion};
use dmkit_rdma::real::server::{AllocatorService, HostConfig, NodeMemory, ServeReport, ServerClient, ServiceNode};
use dmkit_rdma::real::wire::{self, Message, PROTOCOL_VERSION};
use dmkit_rdma::service::{LocalMemory, Replier, Responder, Service, ServiceHost};
use dmkit_rdma::sync::Queue;
use dmkit_rdma::{Buf, ClientCtx, NodeId, RemoteAddr, Request, Response, Verbs, VerbsError};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const MEMORY: usize = 1 << 20;

fn nic() -> Option<Nic> {
    let name = std::env::var("DMKIT_RDMA_DEVICE").ok();
    match Nic::open(name.as_deref(), 1, None) {
        #[cfg(feature = "mlx5-masked")]
        Ok(mut nic) if std::env::var("DMKIT_RDMA_EXTENDED_QP").is_ok() => {
            nic.use_extended_queue_pairs();
            Some(nic)
        }
        #[cfg(not(feature = "mlx5-masked"))]
        Ok(_) if std::env::var("DMKIT_RDMA_EXTENDED_QP").is_ok() => {
            panic!("DMKIT_RDMA_EXTENDED_QP needs a test binary built with feature mlx5-masked")
        }
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
    eprintln!("device {:?}, {:?}", nic.caps(), e);
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
    use dmkit_rdma::real::node::dial;
    use dmkit_rdma::real::runtime::Executor;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, host) = start_memory_node(&nic, NodeId(0), &stop);
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
    let (report, memory) = host.join().unwrap();
    assert_eq!((report.admitted, report.refused), (2, 1));
    assert_eq!(memory.read(64, 8).unwrap(), vec![9u8; 8]);
}

/// What the NIC has, as a node serves it and a client sees it: device memory (region 1) and
/// masked atomics. Soft-RoCE has neither: `max_dm_size` is 0, a node serves no device memory,
/// the welcome carries none, clients' caps say 0 bytes, and a region-1 verb is refused before
/// it is posted (out of range, naming the device region), leaving the queue pair working. On a
/// NIC with device memory, the node serves all of it, zeroed, and every verb reaches it.
#[test]
fn device_memory_and_masked_atomics_as_the_nic_has_them() {
    use dmkit_rdma::real::device::DeviceMemory;
    use dmkit_rdma::real::node::dial;
    use dmkit_rdma::real::runtime::Executor;
    use dmkit_rdma::{MaskedAtomics, Region as AddrRegion};
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let caps = nic.caps().clone();
    eprintln!("{}: device memory {} bytes, masked atomics {:?}", caps.name, caps.max_dm_bytes, caps.masked_atomics);
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, host) = start_memory_node(&nic, NodeId(0), &stop);
    let cq = nic.completion_queue(256).unwrap();
    let (conns, control) = dial(&nic, std::slice::from_ref(&cq), addr, NodeId(0), "tok", 1).unwrap();
    let device = conns[0].regions.device;
    let view_qp = {
        // A second queue pair for the blocking executor, over its own connection.
        let cq = nic.completion_queue(64).unwrap();
        let (mut c, control) = dial(&nic, std::slice::from_ref(&cq), addr, NodeId(0), "tok", 2).unwrap();
        (c.pop().unwrap(), control)
    };
    let mut blocking = BlockingExecutor::new(&nic, view_qp.0.qp, view_qp.0.regions, 4096).unwrap();
    let exec = Executor::new(nic.clone(), cq, conns, NodeId(1), 0, 1, 1 << 20).unwrap();
    let client = exec.client(0, 0);
    assert_eq!(client.caps().masked_atomics, caps.masked_atomics);
    assert_eq!(blocking.caps().masked_atomics, caps.masked_atomics);
    // Native only with feature mlx5-masked, and never on Soft-RoCE.
    if cfg!(not(feature = "mlx5-masked")) || caps.name.starts_with("rxe") {
        assert_eq!(caps.masked_atomics, MaskedAtomics::Emulated);
    }
    let dm = |offset| RemoteAddr::new(AddrRegion::Device, NodeId(0), offset);
    if caps.max_dm_bytes == 0 {
        // Soft-RoCE: no device memory anywhere.
        let err = DeviceMemory::new(&nic, 4096).unwrap_err().to_string();
        assert!(err.contains("device memory"), "{err}");
        assert_eq!(device, None, "the welcome carries no device region");
        assert_eq!(client.caps().device_memory_bytes, 0);
        assert_eq!(blocking.caps().device_memory_bytes, 0);
        let refused = blocking.execute(vec![Request::cas(dm(0), 0, 1)], true).unwrap_err();
        assert_eq!(refused, VerbsError::OutOfRange { addr: dm(0), len: 8 });
        assert!(refused.to_string().contains("0:dev:0x0"), "{refused}");
        let (verb, after) = exec
            .block_on(async move {
                let verb = client.faa(dm(64), 1).await;
                // The refusal posted nothing: the queue pair still works.
                let after = client.faa(at(0), 5).await;
                (verb, after)
            })
            .unwrap();
        assert_eq!(verb, Err(VerbsError::OutOfRange { addr: dm(64), len: 8 }));
        assert_eq!(after, Ok(0));
        assert_eq!(one(&mut blocking, Request::read_len(at(0), 8)).into_buf().unwrap().u64_at(0), 5);
    } else {
        // A NIC with device memory (never run here: these machines have no ConnectX).
        let d = device.expect("a node on a NIC with device memory serves it");
        assert_eq!((d.addr, d.len), (0, caps.max_dm_bytes / 64 * 64), "zero-based, all of it");
        assert_eq!(client.caps().device_memory_bytes, d.len);
        assert_eq!(blocking.caps().device_memory_bytes, d.len);
        let last = d.len - 8;
        let (zero, cas, faa, read) = exec
            .block_on(async move {
                let zero = client.read(dm(last), Buf::zeroed(8)).await.unwrap().u64_at(0);
                let cas = client.cas(dm(0), 0, 7).await.unwrap();
                let faa = client.faa(dm(8), 3).await.unwrap();
                client.write(dm(16), Buf::from(vec![9u8; 8])).await.unwrap();
                let read = client.read(dm(0), Buf::zeroed(24)).await.unwrap();
                (zero, cas, faa, read)
            })
            .unwrap();
        assert_eq!((zero, cas, faa), (0, 0, 0), "device memory starts zeroed");
        assert_eq!(read.u64_at(0), 7);
        assert_eq!(read.u64_at(8), 3);
        assert_eq!(&read.as_slice()[16..], &[9u8; 8]);
        let past = blocking.execute(vec![Request::read_len(dm(d.len), 8)], true).unwrap_err();
        assert!(matches!(past, VerbsError::OutOfRange { .. }), "{past}");
        let old = blocking.execute(vec![Request::masked_cas(dm(0), 7, 0xff, 0x100, 0xff00)], true).unwrap();
        assert_eq!(old[0].atomic().unwrap(), 7);
        assert_eq!(one(&mut blocking, Request::read_len(dm(0), 8)).into_buf().unwrap().u64_at(0), 0x107);
    }
    drop((control, view_qp.1));
    stop.store(true, Ordering::SeqCst);
    host.join().unwrap();
}

type NodeThread = std::thread::JoinHandle<(ServeReport, Arc<NodeMemory>)>;

/// A memory node (the allocator as a service, offsets from 4096) on a thread of its own,
/// serving until `stop`; returns its control address.
fn start_memory_node(nic: &Arc<Nic>, node: NodeId, stop: &Arc<AtomicBool>) -> (std::net::SocketAddr, NodeThread) {
    let config = HostConfig::new(node, "memory node", "127.0.0.1:0".parse().unwrap(), MEMORY as u64, "tok");
    start_node(nic, config, stop, move |host| {
        host.add_service(node, ALLOCATOR_SERVICE, move || AllocatorService::new(node, 4096, MEMORY as u64)).unwrap();
    })
}

/// A service node built from `config` and `install` on a thread of its own, serving until
/// `stop`; returns its control address.
fn start_node(
    nic: &Arc<Nic>,
    config: HostConfig,
    stop: &Arc<AtomicBool>,
    install: impl FnOnce(&mut ServiceNode) + Send + 'static,
) -> (std::net::SocketAddr, NodeThread) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (nic, stop) = (nic.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let mut host = ServiceNode::new(nic, config).unwrap();
        install(&mut host);
        addr_tx.send(host.local_addr()).unwrap();
        let report = host.serve(&stop).unwrap();
        (report, host.memory())
    });
    (addr_rx.recv().unwrap(), thread)
}

// ------------------------------------------------------------- a server node's services

/// The service ids of the server-node test.
const DEFERRED: u16 = 1;
const LOCAL: u16 = 2;
const SLOW: u16 = 3;
const BIG: u16 = 4;
/// Words of the server node's memory: the worker's local FAA count, a word the LOCAL handler
/// CASes, a word the client FAAs remotely and the handler reads locally.
const APPLIED: u64 = 4096;
const CASED: u64 = 4096 + 64;
const REMOTE_ADDED: u64 = 4096 + 128;
/// The worker's count of requests whose remote FAA has completed: the test stops the nodes only
/// after the last one (stopping after APPLIED alone raced the last remote FAA against memory node
/// 0's exit: "connection 0 is closed (its peer left)", a Soft-RoCE run of 2026-11-30).
const FINISHED: u64 = 4096 + 192;
/// A word of memory node 0 the worker FAAs remotely.
const SHIPPED: u64 = 128;

/// Defers every reply to its worker, which answers what has queued in reverse order (out of
/// arrival order), after a local FAA on its own node and a remote FAA on memory node 0 each.
/// A request "twice" is answered twice; the second answer must be refused.
#[derive(Debug)]
struct Deferred {
    queue: Queue<(Responder, Vec<u8>)>,
    refused: Arc<Mutex<Vec<VerbsError>>>,
    /// The block the worker allocated on memory node 0 by a call when it started.
    allocated: Arc<Mutex<Option<Result<RemoteAddr, VerbsError>>>>,
}

impl Service<ServerClient> for Deferred {
    async fn handle(self: Arc<Self>, _ctx: ServerClient, _request: Vec<u8>) -> Vec<u8> {
        unreachable!("every request is dispatched")
    }

    async fn dispatch(self: Arc<Self>, _ctx: ServerClient, request: Vec<u8>, responder: Responder) -> Option<Vec<u8>> {
        self.queue.push((responder, request));
        None
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, ctx: ServerClient, index: u32) {
        assert_eq!(index, 0);
        let block = dmkit_rdma::alloc::alloc(&ctx, NodeId(0), 4096, 64).await;
        *self.allocated.lock().unwrap() = Some(block);
        loop {
            let mut batch = vec![self.queue.pop().await];
            while let Some(more) = self.queue.try_pop() {
                batch.push(more);
            }
            for (to, request) in batch.into_iter().rev() {
                ctx.local_faa(APPLIED, 1).await.unwrap();
                ctx.faa(RemoteAddr::host(NodeId(0), SHIPPED), 1).await.unwrap();
                ctx.local_faa(FINISHED, 1).await.unwrap();
                ctx.reply(to, request.clone()).unwrap();
                if request == b"twice" {
                    let again = ctx.reply(to, request).unwrap_err();
                    self.refused.lock().unwrap().push(again);
                }
            }
        }
    }
}

/// Local accesses: CAS a word (then a CAS that misses), read a word a client FAAed remotely,
/// and answer with the old words.
#[derive(Debug)]
struct Local;

impl Service<ServerClient> for Local {
    async fn handle(self: Arc<Self>, ctx: ServerClient, _request: Vec<u8>) -> Vec<u8> {
        let hit = ctx.local_cas(CASED, 0, 0xc0ffee).await.unwrap();
        let miss = ctx.local_cas(CASED, 0, 0xbad).await.unwrap();
        let seen = ctx.local_read(REMOTE_ADDED, 8).await.unwrap().u64_at(0);
        let unaligned = ctx.local_faa(CASED + 4, 1).await;
        assert!(matches!(unaligned, Err(VerbsError::Unaligned { .. })), "{unaligned:?}");
        [hit, miss, seen].iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// Answers after a sleep, counting how many of its handlers run at once.
#[derive(Debug)]
struct Slow {
    running: AtomicU32,
    most: Arc<AtomicU32>,
}

impl Service<ServerClient> for Slow {
    async fn handle(self: Arc<Self>, ctx: ServerClient, request: Vec<u8>) -> Vec<u8> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        ctx.sleep(2_000_000).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        request
    }
}

/// Answers with more than a call message holds.
#[derive(Debug)]
struct Big;

impl Service<ServerClient> for Big {
    async fn handle(self: Arc<Self>, _ctx: ServerClient, _request: Vec<u8>) -> Vec<u8> {
        vec![1u8; 5000]
    }
}

/// A server node (id 1, two RPC threads) hosting async services, and memory node 0 its worker
/// reaches: deferred replies from a worker to more callers than RPC threads and than call
/// credits, out of order, one of them a full 4 KiB each way; a second reply refused; local
/// CAS/FAA visible to remote READs and a remote FAA visible to a local read; a worker's verbs
/// and call to another node; handlers never running on more threads than the node has; an
/// unknown service, and requests and replies over the 4 KiB limit; calls dropped as soon as
/// they are made (fire and forget, more than the credits) still delivered.
#[test]
fn a_server_node_hosts_async_services() {
    use dmkit_rdma::real::node::dial;
    use dmkit_rdma::real::runtime::Executor;
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let stop = Arc::new(AtomicBool::new(false));
    let (mn_addr, mn) = start_memory_node(&nic, NodeId(0), &stop);
    let server = NodeId(1);
    let mut config = HostConfig::new(server, "server node", "127.0.0.1:0".parse().unwrap(), MEMORY as u64, "tok");
    config.rpc_threads = 2;
    config.peers.insert(0, mn_addr);
    let refused = Arc::new(Mutex::new(Vec::new()));
    let allocated = Arc::new(Mutex::new(None));
    let most = Arc::new(AtomicU32::new(0));
    let (r, a, m) = (refused.clone(), allocated.clone(), most.clone());
    let (sn_addr, sn) = start_node(&nic, config, &stop, move |host| {
        host.add_service(server, DEFERRED, move || Deferred {
            queue: Queue::new(),
            refused: r.clone(),
            allocated: a.clone(),
        })
        .unwrap();
        host.add_service(server, LOCAL, || Local).unwrap();
        host.add_service(server, SLOW, move || Slow { running: AtomicU32::new(0), most: m.clone() }).unwrap();
        host.add_service(server, BIG, || Big).unwrap();
        // Another node's service is skipped quietly; a second service with one id is refused.
        host.add_service(NodeId(7), DEFERRED, || Big).unwrap();
        assert!(host.add_service(server, BIG, || Big).is_err());
        assert_eq!(host.services(), vec![DEFERRED, LOCAL, SLOW, BIG]);
        assert_eq!(host.skipped(), &[(NodeId(7), DEFERRED)]);
    });

    let cq = nic.completion_queue(4096).unwrap();
    let mut conns = Vec::new();
    let mut controls = Vec::new();
    for (node, addr) in [(NodeId(0), mn_addr), (server, sn_addr)] {
        let (c, control) = dial(&nic, std::slice::from_ref(&cq), addr, node, "tok", 9).unwrap();
        conns.extend(c);
        controls.push(control);
    }
    let exec = Executor::new(nic.clone(), cq, conns, NodeId(9), 0, 7, 8 << 20).unwrap();
    // More callers than the node's RPC threads and than a queue pair's call credits.
    const CALLERS: u64 = 40;
    // Calls made and dropped at once (more than the credits).
    const DROPPED: u64 = 20;
    let answers = Arc::new(Mutex::new(Vec::new()));
    for i in 0..CALLERS {
        let (c, answers) = (exec.client(i as u32, i as u32), answers.clone());
        exec.spawn(async move {
            let body = match i {
                0 => b"twice".to_vec(),
                // A full 4 KiB payload, each way.
                1 => vec![0x5a; 4096],
                _ => (1000 + i).to_le_bytes().to_vec(),
            };
            let reply = c.call(server, DEFERRED, body.clone()).await.unwrap();
            answers.lock().unwrap().push(reply == body);
        });
    }
    for i in 0..8u64 {
        let c = exec.client(100 + i as u32, 100 + i as u32);
        exec.spawn(async move {
            assert_eq!(c.call(server, SLOW, vec![i as u8]).await.unwrap(), vec![i as u8]);
        });
    }
    exec.run().unwrap();
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers, vec![true; CALLERS as usize], "every caller got its own reply");
    assert_eq!(refused.lock().unwrap().len(), 1, "the second reply to one call is refused");
    let most = most.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "{most} handlers ran at once on a node of two RPC threads");
    let block = allocated.lock().unwrap().clone().expect("the worker started").unwrap();
    assert_eq!(block.node(), NodeId(0), "the worker's call reached memory node 0's allocator");

    let c = exec.client(200, 200);
    let (applied, shipped, locals, cased) = exec
        .block_on(async move {
            let read = |addr| {
                let c = c.clone();
                async move { c.read(addr, Buf::zeroed(8)).await.unwrap().u64_at(0) }
            };
            let applied = read(RemoteAddr::host(server, APPLIED)).await;
            let shipped = read(RemoteAddr::host(NodeId(0), SHIPPED)).await;
            c.faa(RemoteAddr::host(server, REMOTE_ADDED), 42).await.unwrap();
            let locals = c.call(server, LOCAL, Vec::new()).await.unwrap();
            let cased = read(RemoteAddr::host(server, CASED)).await;
            // Bad calls are errors that say why.
            let unknown = c.call(server, 99, Vec::new()).await;
            assert_eq!(unknown, Err(VerbsError::UnknownService { node: server, service: 99 }));
            let big = c.call(server, BIG, Vec::new()).await.unwrap_err().to_string();
            assert!(big.contains("5000") && big.contains("4096"), "{big}");
            let long = c.call(server, LOCAL, vec![0u8; 5000]).await.unwrap_err().to_string();
            assert!(long.contains("5000") && long.contains("4096"), "{long}");
            // Fire and forget: calls whose futures are dropped at once, more than the credits
            // (those past them wait for a credit), are all delivered; then one awaited.
            for i in 0..DROPPED {
                drop(c.call(server, DEFERRED, (2000 + i).to_le_bytes().to_vec()));
            }
            assert_eq!(c.call(server, DEFERRED, b"last".to_vec()).await.unwrap(), b"last");
            let mut after = 0;
            for _ in 0..10_000 {
                after = read(RemoteAddr::host(server, FINISHED)).await;
                if after == CALLERS + DROPPED + 1 {
                    break;
                }
                c.sleep(1_000_000).await;
            }
            assert_eq!(after, CALLERS + DROPPED + 1, "every dropped call reached the worker and memory node 0");
            (applied, shipped, locals, cased)
        })
        .unwrap();
    assert_eq!(applied, CALLERS, "the worker's local FAAs are visible to a remote READ");
    assert_eq!(shipped, CALLERS, "the worker's FAAs reached memory node 0");
    let words: Vec<u64> = locals.chunks(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
    assert_eq!(words, vec![0, 0xc0ffee, 42], "local CAS hit then miss; the remote FAA seen locally");
    assert_eq!(cased, 0xc0ffee, "the local CAS is visible to a remote READ");
    drop(controls);
    stop.store(true, Ordering::SeqCst);
    let (report, memory) = sn.join().unwrap();
    assert_eq!(report.admitted, 1, "the compute side's connection ({report:?})");
    assert_eq!(report.calls, CALLERS + 8 + 3 + DROPPED + 1, "the 5000-byte request never left the client");
    assert_eq!(memory.read(APPLIED, 8).unwrap(), (CALLERS + DROPPED + 1).to_le_bytes());
    assert_eq!(memory.read(FINISHED, 8).unwrap(), (CALLERS + DROPPED + 1).to_le_bytes());
    let (mn_report, _) = mn.join().unwrap();
    assert_eq!(mn_report.admitted, 2, "the compute side and the server node's worker thread");
}

/// Panics in its worker on every request.
#[derive(Debug)]
struct Doomed {
    queue: Queue<Responder>,
}

impl Service<ServerClient> for Doomed {
    async fn handle(self: Arc<Self>, _ctx: ServerClient, _request: Vec<u8>) -> Vec<u8> {
        unreachable!("every request is dispatched")
    }

    async fn dispatch(self: Arc<Self>, _ctx: ServerClient, _request: Vec<u8>, to: Responder) -> Option<Vec<u8>> {
        self.queue.push(to);
        None
    }

    fn workers(&self) -> u32 {
        1
    }

    async fn run_worker(self: Arc<Self>, _ctx: ServerClient, _index: u32) {
        self.queue.pop().await;
        panic!("boom");
    }
}

/// A worker that panics leaves calls nobody will answer: the node stops with an error naming
/// the thread and the panic, instead of running on with callers waiting forever.
#[test]
fn a_panicking_worker_stops_the_node() {
    use dmkit_rdma::real::node::dial;
    use dmkit_rdma::real::runtime::Executor;
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let server = NodeId(1);
    let config = HostConfig::new(server, "server node", "127.0.0.1:0".parse().unwrap(), MEMORY as u64, "tok");
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (node_nic, never) = (nic.clone(), Arc::new(AtomicBool::new(false)));
    let node = std::thread::spawn(move || {
        let mut host = ServiceNode::new(node_nic, config).unwrap();
        host.add_service(server, 9, || Doomed { queue: Queue::new() }).unwrap();
        addr_tx.send(host.local_addr()).unwrap();
        host.serve(&never)
    });
    let addr = addr_rx.recv().unwrap();
    let cq = nic.completion_queue(64).unwrap();
    let (conns, _control) = dial(&nic, std::slice::from_ref(&cq), addr, server, "tok", 9).unwrap();
    let exec = Executor::new(nic.clone(), cq, conns, NodeId(9), 0, 1, 1 << 20).unwrap();
    let c = exec.client(0, 0);
    exec.spawn(async move {
        let _ = c.call(server, 9, b"anything".to_vec()).await;
    });
    // The call is never answered: run the client until the node has stopped.
    let ended = Arc::new(AtomicBool::new(false));
    let e = ended.clone();
    let watcher = std::thread::spawn(move || {
        let out = node.join().unwrap();
        e.store(true, Ordering::SeqCst);
        out
    });
    exec.run_until(&ended).unwrap();
    let err = watcher.join().unwrap().unwrap_err().to_string();
    assert!(err.contains("svc9-worker0") && err.contains("panicked: boom"), "{err}");
}

/// The client half of `scripts/rxe-e2e.sh`: calls a `dmkit server-node --echo-service` process
/// from many coroutines (each reply is its own request, deferred to the service's worker), and
/// READs the word at offset 0 that the worker adds each request's first word to.
#[test]
fn a_server_node_process_answers_calls() {
    use dmkit_rdma::real::node::dial;
    use dmkit_rdma::real::runtime::Executor;
    let Ok(addr) = std::env::var("DMKIT_SERVER_NODE") else {
        eprintln!("skipped: DMKIT_SERVER_NODE names no server node (scripts/rxe-e2e.sh sets it)");
        return;
    };
    let Some(nic) = nic() else { return };
    let nic = Arc::new(nic);
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let node = NodeId(std::env::var("DMKIT_SERVER_NODE_ID").map_or(1, |v| v.parse().unwrap()));
    let service: u16 = std::env::var("DMKIT_ECHO_SERVICE").map_or(7, |v| v.parse().unwrap());
    let token = std::env::var("DMKIT_TOKEN").unwrap_or_else(|_| "vm-token".into());
    let cq = nic.completion_queue(4096).unwrap();
    let (conns, _control) = dial(&nic, std::slice::from_ref(&cq), addr, node, &token, 5).unwrap();
    let exec = Executor::new(nic.clone(), cq, conns, NodeId(5), 0, 3, 8 << 20).unwrap();
    let c = exec.client(0, 0);
    let before = exec
        .block_on(async move { c.read(RemoteAddr::host(node, 0), Buf::zeroed(8)).await.unwrap().u64_at(0) })
        .unwrap();
    const CALLERS: u64 = 24;
    for i in 0..CALLERS {
        let c = exec.client(i as u32 + 1, i as u32 + 1);
        exec.spawn(async move {
            for round in 0..5u64 {
                let body = [(i + 1).to_le_bytes(), round.to_le_bytes()].concat();
                assert_eq!(c.call(node, service, body.clone()).await.unwrap(), body);
            }
        });
    }
    exec.run().unwrap();
    let c = exec.client(100, 100);
    let after = exec
        .block_on(async move { c.read(RemoteAddr::host(node, 0), Buf::zeroed(8)).await.unwrap().u64_at(0) })
        .unwrap();
    assert_eq!(after - before, 5 * CALLERS * (CALLERS + 1) / 2, "the worker's local FAAs, seen remotely");
    eprintln!("server {node} at {addr}: {} echo calls answered", 5 * CALLERS);
}
