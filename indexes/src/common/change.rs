//! What a write does to its key, how a batch of them (an RDWC window's combined writes, in
//! deposit order) folds into one final state, and searches and writes routed through an RDWC
//! table. Shared by the indexes that delegate and combine.

use crate::common::rdwc::{Rdwc, ReadLeader, ReadRole, WriteLeader, WriteRole};
use crate::{Counters, IndexError, PlantedBug, RaceHandler};

// What a write does to its key: defined at the crate root (`Index::write`'s argument), and
// named here too, beside the helpers that fold and route it.
pub use crate::Change;

/// A delegated or combined operation's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Read(Result<Option<Vec<u8>>, IndexError>),
    Write(Result<bool, IndexError>),
}

/// Applies `changes` in order to `state` (the key's value, or `None` if absent). Returns the
/// final state and, per change, whether the key existed just before it (each operation's
/// result: upsert and update report "existed", delete reports "was deleted").
pub fn fold(mut state: Option<Vec<u8>>, changes: &[Change]) -> (Option<Vec<u8>>, Vec<bool>) {
    let mut results = Vec::with_capacity(changes.len());
    for c in changes {
        results.push(state.is_some());
        match c {
            Change::Upsert(v) => state = Some(v.clone()),
            Change::Update(v) if state.is_some() => state = Some(v.clone()),
            Change::Update(_) => {}
            Change::Delete => state = None,
        }
    }
    (state, results)
}

/// What [`Combined::modify_remote`] returns for a batch's outcome when `closed` operations were
/// taken from the window: the first one's result, and one per operation once it was closed (an
/// error goes to each of them).
#[allow(clippy::type_complexity)]
pub fn replies(
    outcome: Result<Vec<bool>, IndexError>,
    closed: usize,
) -> (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>) {
    match outcome {
        Ok(results) => {
            let replies: Vec<Result<bool, IndexError>> = results.into_iter().map(Ok).collect();
            (replies[0].clone(), Some(replies))
        }
        Err(e) if closed > 0 => (Err(e.clone()), Some(vec![Err(e); closed])),
        Err(e) => (Err(e), None),
    }
}

/// A client handle whose searches and writes can go through an RDWC table ([`search_via`],
/// [`write_via`]): the index supplies the remote search and the remote write.
pub trait Combined {
    /// The remote search. A leader calls [`ReadLeader::mark`] right before each READ that may
    /// decide the result (and `unmark` if one did not decide it alone).
    fn search_remote(
        &mut self,
        key: &[u8],
        leader: Option<&mut ReadLeader<'_, Change, Reply>>,
    ) -> impl std::future::Future<Output = Result<Option<Vec<u8>>, IndexError>>;

    /// Applies `changes` (or, as a leader, the changes its window admits when it calls
    /// [`WriteLeader::close`]) to `key`: the first change's result and, once the window
    /// closed, one result per change.
    #[allow(clippy::type_complexity)]
    fn modify_remote(
        &mut self,
        key: &[u8],
        changes: Vec<Change>,
        leader: Option<&mut WriteLeader<'_, Change, Reply>>,
    ) -> impl std::future::Future<Output = (Result<bool, IndexError>, Option<Vec<Result<bool, IndexError>>>)>;

    fn counters_mut(&mut self) -> &mut Counters;

    /// The planted bug that drops the fallbacks: a follower whose leader gave up answers as if
    /// its change had been applied (not found, for a search) instead of doing it itself.
    fn no_fallback(&self) -> bool {
        false
    }

    /// The planted bug of SMART's artifact's hand-over: a writer queued behind a window takes
    /// the window's outcome as its own (the key existed, its change applied) instead of running
    /// its change, although it may have queued after the leader's write took effect.
    fn late_handover(&self) -> bool {
        false
    }
}

/// A search that followed a read window and took its leader's result (no remote work).
pub const RDWC_DELEGATED: &str = "rdwc_delegated";
/// A read follower whose leader gave up without a result: it searches itself.
pub const RDWC_READ_FALLBACK: &str = "rdwc_read_fallback";
/// A write that found its key's window closed in a table that queues late writers: it waits.
pub const RDWC_WRITE_QUEUED: &str = "rdwc_write_queued";
/// A write window's leader that applied other writers' changes with its own.
pub const RDWC_LEADER_COMBINED: &str = "rdwc_leader_combined";
/// A write follower whose change a leader applied and reported (a combined write).
pub const RDWC_COMBINED: &str = "rdwc_combined";
/// A write follower whose leader gave up before applying its change: it applies it itself.
pub const RDWC_WRITE_FALLBACK: &str = "rdwc_write_fallback";

/// A delegated read whose leader gave up without a result (its own search failed) reads
/// for itself.
pub const RDWC_READ_FALLBACK_HANDLER: RaceHandler = RaceHandler {
    event: RDWC_READ_FALLBACK,
    race: "a read follower's leader failed or gave up: the follower searches itself instead of answering with nothing",
};

/// A write that found its key's window closed, in a table that queues late writers (the
/// hand-over of SMART's baselines), waits for the window to end.
pub const RDWC_WRITE_QUEUED_HANDLER: RaceHandler = RaceHandler {
    event: RDWC_WRITE_QUEUED,
    race: "a same-key write found the compute node's window closed (another write of the key is publishing): it waits for that write to end, then leads or joins the next window",
};

/// A combined write whose leader gave up before applying it applies it itself.
pub const RDWC_WRITE_FALLBACK_HANDLER: RaceHandler = RaceHandler {
    event: RDWC_WRITE_FALLBACK,
    race: "a write follower's leader gave up before applying its change: the follower applies it itself, so no write is lost",
};

/// The fallbacks above removed ([`Combined::no_fallback`]): the plant of every index that
/// implements it.
pub const RDWC_NO_FALLBACK: PlantedBug = PlantedBug {
    name: "rdwc-no-fallback",
    description: "an RDWC follower whose leader gave up (its READ failed) answers not-found or not-existed instead of searching or writing itself: a lost write, a missed key",
};

/// A search through `table`: lead a window, follow one (taking its result, or searching again
/// if cut off), or bypass it on a hash conflict.
pub async fn search_via<T: Combined>(
    t: &mut T,
    table: &Rdwc<Change, Reply>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, IndexError> {
    match table.begin_read(key) {
        ReadRole::Leader(mut leader) => {
            let r = t.search_remote(key, Some(&mut leader)).await;
            leader.finish(Reply::Read(r.clone()));
            r
        }
        ReadRole::Follower(wait) => match wait.await {
            Some(Reply::Read(r)) => {
                t.counters_mut().event(RDWC_DELEGATED);
                r
            }
            // The leader gave up without a result to share: read ourselves.
            _ => {
                t.counters_mut().event(RDWC_READ_FALLBACK);
                if t.no_fallback() {
                    return Ok(None);
                }
                t.search_remote(key, None).await
            }
        },
        ReadRole::Bypass => t.search_remote(key, None).await,
    }
}

/// A write through `table`: lead a window (applying every change it admits), have the
/// change combined into a leader's, bypass, or (a table that queues late writers) wait for the
/// key's closed window to end and try again.
pub async fn write_via<T: Combined>(
    t: &mut T,
    table: &Rdwc<Change, Reply>,
    key: &[u8],
    change: Change,
) -> Result<bool, IndexError> {
    let role = loop {
        // The table takes a copy: `change` stays here for a fallback or the next turn.
        match table.begin_write(key, change.clone()) {
            WriteRole::Queued(_, turn) => {
                t.counters_mut().event(RDWC_WRITE_QUEUED);
                turn.await;
                if t.late_handover() {
                    return Ok(true);
                }
            }
            role => break role,
        }
    };
    match role {
        WriteRole::Leader(mut leader) => {
            let (mine, replies) = t.modify_remote(key, vec![], Some(&mut leader)).await;
            if let Some(replies) = replies {
                if replies.len() > 1 {
                    t.counters_mut().event(RDWC_LEADER_COMBINED);
                }
                leader.finish(replies.into_iter().map(Reply::Write).collect());
            }
            mine
        }
        WriteRole::Follower(wait) => match wait.await {
            Some(Reply::Write(r)) => {
                t.counters_mut().event(RDWC_COMBINED);
                r
            }
            // The leader gave up before taking our change: apply it ourselves.
            _ => {
                t.counters_mut().event(RDWC_WRITE_FALLBACK);
                if t.no_fallback() {
                    return Ok(false);
                }
                t.modify_remote(key, vec![change], None).await.0
            }
        },
        WriteRole::Bypass(change) => t.modify_remote(key, vec![change], None).await.0,
        WriteRole::Queued(..) => unreachable!("the loop above waits out every queued turn"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_reports_existence_before_each_change() {
        let v = |b: u8| vec![b];
        let (s, r) = fold(None, &[Change::Update(v(1)), Change::Upsert(v(2)), Change::Delete, Change::Delete]);
        assert_eq!((s, r), (None, vec![false, false, true, false]));
        let (s, r) = fold(Some(v(0)), &[Change::Update(v(3))]);
        assert_eq!((s, r), (Some(v(3)), vec![true]));
    }
}
