//! Doorbell batches that span memory nodes.

use dmkit_rdma::{NodeId, Request, Response, Verbs, VerbsError};

/// Posts `requests` as one doorbell batch per memory node (a batch goes to one node), every
/// batch before awaiting any, so the batches are in flight together; returns the responses in
/// request order.
pub async fn post_per_node<V: Verbs>(ctx: &V, requests: Vec<Request>) -> Result<Vec<Response>, VerbsError> {
    let (groups, total) = group_by_node(requests);
    let posted: Vec<(Vec<usize>, _)> = groups.into_iter().map(|(_, at, batch)| (at, ctx.post(batch))).collect();
    let mut out: Vec<Option<Response>> = (0..total).map(|_| None).collect();
    for (at, done) in posted {
        for (i, r) in at.into_iter().zip(done.await?) {
            out[i] = Some(r);
        }
    }
    Ok(out.into_iter().map(|r| r.expect("every request answered")).collect())
}

/// [`post_per_node`] keeping what completed ([`Verbs::post_keeping`]): each request's response
/// if its verb completed, and the first failure. Every batch is awaited.
pub async fn post_per_node_keeping<V: Verbs>(
    ctx: &V,
    requests: Vec<Request>,
) -> (Vec<Option<Response>>, Option<VerbsError>) {
    let (groups, total) = group_by_node(requests);
    let posted: Vec<(Vec<usize>, _)> = groups.into_iter().map(|(_, at, batch)| (at, ctx.post_keeping(batch))).collect();
    let mut out: Vec<Option<Response>> = (0..total).map(|_| None).collect();
    let mut error = None;
    for (at, done) in posted {
        let done = done.await;
        for (i, r) in at.into_iter().zip(done.completed) {
            out[i] = Some(r);
        }
        error = error.or(done.error);
    }
    (out, error)
}

/// The requests grouped by memory node, each with the request indices it holds; and their count.
#[allow(clippy::type_complexity)]
fn group_by_node(requests: Vec<Request>) -> (Vec<(NodeId, Vec<usize>, Vec<Request>)>, usize) {
    let mut groups: Vec<(NodeId, Vec<usize>, Vec<Request>)> = Vec::new();
    for (i, r) in requests.into_iter().enumerate() {
        let node = r.addr.node();
        match groups.iter_mut().find(|(n, _, _)| *n == node) {
            Some((_, at, batch)) => {
                at.push(i);
                batch.push(r);
            }
            None => groups.push((node, vec![i], vec![r])),
        }
    }
    let total = groups.iter().map(|g| g.1.len()).sum();
    (groups, total)
}
