//! The schedule explorer: runs a scenario again and again, letting a strategy pick every step
//! at the simulator's seam, and judges each run.
//!
//! Every wait point is a choice (a verb's arrival, each atomicity unit it touches, each half of
//! an RMW, a completion, a timer, a wake-up, an RPC's arrival and reply, a local access), so the
//! explorer sees every interleaving the memory model allows. Strategies:
//!
//! - [`Mode::Random`]: a uniformly random enabled step each time, a fresh seed per schedule.
//! - [`Mode::Pct`]: probabilistic concurrency testing (Burckhardt et al., ASPLOS'10): random
//!   priorities per actor, the highest-priority enabled actor runs, and at `depth - 1` random
//!   points the running actor drops to the lowest priority (so does a client whose `yield_now`
//!   runs: it is spinning on someone). Finds any bug of depth `d` with
//!   probability at least 1/(n·k^(d-1)) per schedule.
//! - [`Mode::Dfs`]: systematic depth-first search over schedules with at most `preemptions`
//!   preemptions (switching away from an actor that could go on), by iterative context bounding
//!   (CHESS, Musuvathi and Qadeer, PLDI'07): every schedule with no preemption first, then with
//!   one, then two, so shallow bugs are found early. Pruned by sleep sets: after
//!   exploring step `t` at a point, sibling branches need not explore `t` first again until a
//!   step dependent on it runs. Independence is conservative: two memory steps are independent if
//!   they touch disjoint bytes or only read; a step that wakes a task is dependent on every other
//!   such step (woken tasks may share compute-node state); faults depend on everything.
//!
//! Each failure comes with the exact list of choices; [`encode_choices`] turns it into the
//! string `--replay` takes, and [`replay`] runs it again bit for bit.

use dmkit_sim::{Actor, Chooser, EarliestChooser, Sim, SimConfig, SimError, StepClass, StepInfo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How the explorer picks steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Random,
    Pct { depth: u32 },
    Dfs { preemptions: u32 },
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Random => "random",
            Mode::Pct { .. } => "pct",
            Mode::Dfs { .. } => "dfs",
        }
    }

    /// The modes by name: `random`, `pct` (depth 3), `dfs` (two preemptions).
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "random" => Ok(Mode::Random),
            "pct" => Ok(Mode::Pct { depth: 3 }),
            "dfs" => Ok(Mode::Dfs { preemptions: 2 }),
            _ => Err(format!("unknown mode '{s}' (random, pct, dfs)")),
        }
    }
}

/// Turns the seam on for the part of a scenario that is explored: set-up (creating an index,
/// loading keys) runs earliest-first and is not recorded.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    exploring: Rc<Cell<bool>>,
}

impl Phase {
    /// From now on, every step is the strategy's choice.
    pub fn explore(&self) {
        self.exploring.set(true);
    }
}

/// What a scenario's judge decides about one run.
pub type Judge = Box<dyn FnOnce(&Sim, Result<(), SimError>) -> Result<(), String>>;

/// A scenario the explorer runs: a configuration, and a set-up that spawns the tasks, calls
/// `phase.explore()` when the interesting part starts, and returns the judge of the run.
///
/// `variant` lets a scenario vary its workload between schedules (an index scenario draws its
/// clients' operations from it): random and PCT exploration give every schedule its own
/// variant, DFS keeps one, and a replay string records it.
pub trait Scenario {
    fn config(&self) -> SimConfig;
    fn build(&self, sim: &mut Sim, phase: &Phase, variant: u64) -> Judge;

    /// Whether `build` depends on `variant`. DFS explores a fixed scenario until its bounded tree
    /// is exhausted; a varying one it explores [`DFS_SCHEDULES_PER_VARIANT`] schedules (or to
    /// exhaustion) per workload, then moves to the next.
    fn varies(&self) -> bool {
        false
    }
}

/// Schedules DFS spends on one workload of a varying scenario before it moves to the next.
pub const DFS_SCHEDULES_PER_VARIANT: u64 = 2_000;

/// A failed run, with everything needed to run it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// The workload variant the scenario was built with.
    pub variant: u64,
    /// The schedule: the index chosen among the enabled steps at each explored step.
    pub choices: Vec<u32>,
    /// Which schedule of the exploration it was (0-based).
    pub schedule: u64,
}

impl Failure {
    /// The `--replay` string of this schedule: `variant:choices`.
    pub fn replay_string(&self) -> String {
        encode_replay(self.variant, &self.choices)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (schedule {}, {} choices)", self.message, self.schedule, self.choices.len())
    }
}

/// What an exploration did.
#[derive(Clone, Debug, Default)]
pub struct Exploration {
    pub mode: Option<Mode>,
    pub schedules: u64,
    pub steps: u64,
    pub elapsed: Duration,
    /// DFS only: every schedule within the bound was explored.
    pub complete: bool,
    pub failure: Option<Failure>,
}

impl Exploration {
    pub fn schedules_per_second(&self) -> f64 {
        self.schedules as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

// ------------------------------------------------------------------ replay strings

const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

fn base36(mut n: u64) -> String {
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII")
}

/// Choices as a compact string: base-36 indices separated by `.`, runs written `index*count`.
pub fn encode_choices(choices: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < choices.len() {
        let c = choices[i];
        let run = choices[i..].iter().take_while(|&&x| x == c).count();
        parts.push(if run > 2 { format!("{}*{}", base36(c as u64), base36(run as u64)) } else { base36(c as u64) });
        i += if run > 2 { run } else { 1 };
    }
    parts.join(".")
}

/// A replay string: the workload variant and the choices, `variant:choices` (base 36).
pub fn encode_replay(variant: u64, choices: &[u32]) -> String {
    format!("{}:{}", base36(variant), encode_choices(choices))
}

/// The inverse of [`encode_replay`].
pub fn decode_replay(s: &str) -> Result<(u64, Vec<u32>), String> {
    let (variant, choices) = s.split_once(':').ok_or("a replay string is variant:choices")?;
    let variant = u64::from_str_radix(variant, 36).map_err(|_| format!("bad replay variant '{variant}'"))?;
    Ok((variant, decode_choices(choices)?))
}

/// The inverse of [`encode_choices`].
pub fn decode_choices(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Ok(out);
    }
    for part in s.split('.') {
        let (value, count) = match part.split_once('*') {
            Some((v, n)) => (v, n),
            None => (part, "1"),
        };
        let parse = |t: &str| u64::from_str_radix(t, 36).map_err(|_| format!("bad replay token '{part}'"));
        let (value, count) = (parse(value)?, parse(count)?);
        if value > u32::MAX as u64 || count > 10_000_000 {
            return Err(format!("bad replay token '{part}'"));
        }
        out.extend(std::iter::repeat_n(value as u32, count as usize));
    }
    Ok(out)
}

// ------------------------------------------------------------------ strategies

/// A strategy for the explored part of a run.
trait Strategy {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize;
}

struct RandomStrategy(ChaCha8Rng);

impl Strategy for RandomStrategy {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        self.0.random_range(0..enabled.len())
    }
}

/// Priorities below this are given at change points and on yields, each lower than the last;
/// initial priorities lie above it.
const LOW_PRIORITIES: u64 = 1 << 40;

/// PCT with `depth - 1` priority change points over an estimated `k` steps. A client whose
/// `yield_now` step runs also drops to the lowest priority (it is waiting for someone): without
/// that, a spinning client at the top starves the lock holder until its retries run out, and
/// the run reports a failed operation PCT manufactured (the yield-aware PCT of CHESS/Coyote).
struct PctStrategy {
    rng: ChaCha8Rng,
    priorities: BTreeMap<Actor, u64>,
    change_points: Vec<u64>,
    step: u64,
    last: Option<Actor>,
    next_low: u64,
}

impl PctStrategy {
    fn new(seed: u64, depth: u32, estimated_steps: u64) -> PctStrategy {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut change_points: Vec<u64> =
            (1..depth.max(1)).map(|_| rng.random_range(1..=estimated_steps.max(2))).collect();
        change_points.sort_unstable();
        PctStrategy { rng, priorities: BTreeMap::new(), change_points, step: 0, last: None, next_low: LOW_PRIORITIES }
    }
}

impl Strategy for PctStrategy {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        self.step += 1;
        if self.change_points.first() == Some(&self.step) {
            self.change_points.remove(0);
            if let Some(a) = self.last {
                // The running actor drops below every initial priority.
                self.next_low = self.next_low.saturating_sub(1);
                self.priorities.insert(a, self.next_low);
            }
        }
        for s in enabled {
            if !self.priorities.contains_key(&s.actor) {
                // Initial priorities are random and above every change-point priority.
                let p = LOW_PRIORITIES + 1 + self.rng.random_range(0..1u64 << 40);
                self.priorities.insert(s.actor, p);
            }
        }
        let best = (0..enabled.len())
            .max_by_key(|&i| (self.priorities[&enabled[i].actor], std::cmp::Reverse(enabled[i].seq)))
            .expect("enabled is never empty");
        self.last = Some(enabled[best].actor);
        if enabled[best].class == StepClass::Yield {
            self.next_low = self.next_low.saturating_sub(1);
            self.priorities.insert(enabled[best].actor, self.next_low);
        }
        best
    }
}

/// Independence of two steps for sleep sets (conservative; see the module doc).
fn independent(a: &StepInfo, b: &StepInfo) -> bool {
    if a.class == StepClass::Fault || b.class == StepClass::Fault {
        return false;
    }
    let touches_memory =
        |s: &StepInfo| matches!(s.class, StepClass::Unit | StepClass::RmwRead | StepClass::RmwWrite | StepClass::Local);
    let inert = |s: &StepInfo| s.class == StepClass::Arrive;
    match (touches_memory(a), touches_memory(b)) {
        (true, true) => {
            let (Some(x), Some(y)) = (a.addr, b.addr) else { return false };
            if !(a.writes || b.writes) {
                return true;
            }
            if x.node() != y.node() || x.region() != y.region() {
                return true;
            }
            let (x0, x1) = (x.offset(), x.offset() + a.len as u64);
            let (y0, y1) = (y.offset(), y.offset() + b.len as u64);
            x1 <= y0 || y1 <= x0
        }
        // A wake-up and a memory step commute: the woken task's code touches remote memory only
        // through later steps.
        (true, false) | (false, true) => true,
        (false, false) => a.actor != b.actor && (inert(a) || inert(b)),
    }
}

/// One decision point of a DFS execution.
struct Frame {
    enabled: Vec<StepInfo>,
    chosen: usize,
    /// Alternatives already explored from this point.
    explored: Vec<usize>,
    /// Steps (by seq) asleep at this point.
    sleep: Vec<StepInfo>,
    preemptions: u32,
    last: Option<Actor>,
}

/// The DFS state across executions.
struct DfsState {
    /// The preemption bound of the current pass (0, 1, ... up to the mode's).
    bound: u32,
    stack: Vec<Frame>,
    /// The forced prefix of the next execution.
    prefix: Vec<usize>,
    exhausted: bool,
}

/// Non-preemptive default: go on with the last actor if it can, else the oldest enabled step;
/// never a sleeping step if another is enabled.
fn default_choice(enabled: &[StepInfo], last: Option<Actor>, sleep: &[StepInfo]) -> usize {
    let awake = |i: &usize| !sleep.iter().any(|s| s.seq == enabled[*i].seq);
    let oldest = |it: &mut dyn Iterator<Item = usize>| it.min_by_key(|&i| enabled[i].seq);
    if let Some(a) = last {
        if let Some(i) = oldest(&mut (0..enabled.len()).filter(|&i| enabled[i].actor == a).filter(awake)) {
            return i;
        }
    }
    oldest(&mut (0..enabled.len()).filter(awake)).unwrap_or_else(|| oldest(&mut (0..enabled.len())).expect("non-empty"))
}

/// What a choice costs against the bound: 0 for the default (non-preemptive) choice; 1 for a
/// preemption (switching away from the last actor while it has an awake step) or for taking an
/// actor's steps out of their order (a READ's units in another order, say: an actor may have
/// several enabled steps, and reordering them matters only together with other actors' steps).
/// A switch forced because the last actor's steps are all asleep or done costs nothing.
fn deviation(enabled: &[StepInfo], last: Option<Actor>, pick: usize, sleep: &[StepInfo]) -> u32 {
    let awake = |s: &StepInfo| !sleep.iter().any(|z| z.seq == s.seq);
    let actor = enabled[pick].actor;
    let last_awake = last.is_some_and(|a| enabled.iter().any(|s| s.actor == a && awake(s)));
    if last_awake && last != Some(actor) {
        return 1;
    }
    // Within the chosen actor, the default is its oldest awake step.
    let oldest = enabled.iter().filter(|s| s.actor == actor && awake(s)).map(|s| s.seq).min();
    u32::from(oldest.is_some_and(|seq| seq != enabled[pick].seq))
}

/// One DFS execution: follows the prefix, then the default policy, recording frames.
struct DfsStrategy {
    state: Rc<RefCell<DfsState>>,
    depth: usize,
    last: Option<Actor>,
    preemptions: u32,
    sleep: Vec<StepInfo>,
}

impl Strategy for DfsStrategy {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        let mut st = self.state.borrow_mut();
        let pick = if self.depth < st.prefix.len() {
            let pick = st.prefix[self.depth];
            assert!(pick < enabled.len(), "DFS prefix diverged: the scenario is not deterministic");
            // Re-executing the prefix: the frame is already on the stack; refresh its sleep set.
            self.sleep = st.stack[self.depth].sleep.clone();
            pick
        } else {
            let pick = default_choice(enabled, self.last, &self.sleep);
            st.stack.push(Frame {
                enabled: enabled.to_vec(),
                chosen: pick,
                explored: vec![pick],
                sleep: self.sleep.clone(),
                preemptions: self.preemptions,
                last: self.last,
            });
            pick
        };
        self.preemptions += deviation(enabled, self.last, pick, &st.stack[self.depth].sleep);
        // Steps asleep here, plus the siblings explored before this choice, stay asleep in the
        // child while they are independent of the chosen step.
        let frame = &st.stack[self.depth];
        let chosen = enabled[pick];
        let mut child: Vec<StepInfo> = frame.sleep.clone();
        for &e in &frame.explored {
            if e != pick {
                child.push(frame.enabled[e]);
            }
        }
        child.retain(|s| s.seq != chosen.seq && independent(s, &chosen));
        self.sleep = child;
        self.last = Some(chosen.actor);
        self.depth += 1;
        pick
    }
}

impl DfsState {
    /// Prepares the next execution's prefix; false when the tree is exhausted.
    fn backtrack(&mut self) -> bool {
        while let Some(frame) = self.stack.last_mut() {
            let asleep = |i: usize| frame.sleep.iter().any(|s| s.seq == frame.enabled[i].seq);
            let next = (0..frame.enabled.len()).find(|&i| {
                !frame.explored.contains(&i)
                    && !asleep(i)
                    && frame.preemptions + deviation(&frame.enabled, frame.last, i, &frame.sleep) <= self.bound
            });
            match next {
                Some(i) => {
                    frame.explored.push(i);
                    frame.chosen = i;
                    self.prefix = self.stack.iter().map(|f| f.chosen).collect();
                    return true;
                }
                None => {
                    self.stack.pop();
                }
            }
        }
        self.exhausted = true;
        false
    }
}

/// The chooser the simulator sees: earliest-first during set-up; then replay, then the strategy,
/// recording every explored choice.
struct ExploringChooser {
    exploring: Rc<Cell<bool>>,
    strategy: Box<dyn Strategy>,
    replay: Vec<u32>,
    choices: Rc<RefCell<Vec<u32>>>,
    diverged: Rc<Cell<bool>>,
}

impl Chooser for ExploringChooser {
    fn choose(&mut self, enabled: &[StepInfo]) -> usize {
        if !self.exploring.get() {
            return EarliestChooser.choose(enabled);
        }
        let n = self.choices.borrow().len();
        let pick = match self.replay.get(n) {
            Some(&c) if (c as usize) < enabled.len() => c as usize,
            Some(_) => {
                // The replay string does not fit this scenario.
                self.diverged.set(true);
                0
            }
            None => self.strategy.choose(enabled),
        };
        self.choices.borrow_mut().push(pick as u32);
        pick
    }
}

/// Runs one schedule.
fn run_once(
    scenario: &dyn Scenario,
    variant: u64,
    strategy: Box<dyn Strategy>,
    replay: Vec<u32>,
) -> (Vec<u32>, u64, Result<(), String>) {
    let phase = Phase::default();
    let choices = Rc::new(RefCell::new(Vec::new()));
    let diverged = Rc::new(Cell::new(false));
    let chooser = ExploringChooser {
        exploring: phase.exploring.clone(),
        strategy,
        replay,
        choices: choices.clone(),
        diverged: diverged.clone(),
    };
    let mut sim = match Sim::with_chooser(scenario.config(), Box::new(chooser)) {
        Ok(sim) => sim,
        Err(e) => return (Vec::new(), 0, Err(e.to_string())),
    };
    let judge = scenario.build(&mut sim, &phase, variant);
    let outcome = sim.run();
    let steps = sim.stats().steps;
    let mut verdict = judge(&sim, outcome);
    if diverged.get() && verdict.is_ok() {
        verdict = Err("the replay string does not match this scenario".into());
    }
    let choices = choices.borrow().clone();
    (choices, steps, verdict)
}

/// Explores `scenario` with `mode` for up to `budget` (wall-clock) or `max_schedules`, whichever
/// comes first; stops at the first failure. `seed` fixes the sequence of schedules.
pub fn explore(scenario: &dyn Scenario, mode: Mode, seed: u64, budget: Duration, max_schedules: u64) -> Exploration {
    let started = Instant::now();
    let mut out = Exploration { mode: Some(mode), ..Exploration::default() };
    let dfs = Rc::new(RefCell::new(DfsState {
        bound: match mode {
            Mode::Dfs { preemptions } => preemptions,
            _ => 0,
        },
        stack: Vec::new(),
        prefix: Vec::new(),
        exhausted: false,
    }));
    let mut estimated_steps = 1_000;
    let (mut dfs_variant, mut dfs_schedules) = (seed, 0u64);
    let max_bound = match mode {
        Mode::Dfs { preemptions } => preemptions,
        _ => 0,
    };
    dfs.borrow_mut().bound = 0;
    while out.schedules < max_schedules && (out.schedules == 0 || started.elapsed() < budget) {
        let schedule_seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(out.schedules);
        let strategy: Box<dyn Strategy> = match mode {
            Mode::Random => Box::new(RandomStrategy(ChaCha8Rng::seed_from_u64(schedule_seed))),
            Mode::Pct { depth } => Box::new(PctStrategy::new(schedule_seed, depth, estimated_steps)),
            Mode::Dfs { .. } => {
                Box::new(DfsStrategy { state: dfs.clone(), depth: 0, last: None, preemptions: 0, sleep: Vec::new() })
            }
        };
        // Random and PCT schedules each get their own workload; DFS explores one exhaustively.
        let variant = if matches!(mode, Mode::Dfs { .. }) { dfs_variant } else { schedule_seed };
        let (choices, steps, verdict) = run_once(scenario, variant, strategy, Vec::new());
        out.schedules += 1;
        out.steps += steps;
        estimated_steps = estimated_steps.max(choices.len() as u64);
        if let Err(message) = verdict {
            out.failure = Some(Failure { message, variant, choices, schedule: out.schedules - 1 });
            break;
        }
        if matches!(mode, Mode::Dfs { .. }) {
            dfs_schedules += 1;
            let mut st = dfs.borrow_mut();
            let mut more = st.backtrack();
            if !more && st.bound < max_bound {
                // This pass is exhausted: the next allows one more preemption.
                *st = DfsState { bound: st.bound + 1, stack: Vec::new(), prefix: Vec::new(), exhausted: false };
                more = true;
            }
            if !more && !scenario.varies() {
                out.complete = true;
                break;
            }
            if !more || (scenario.varies() && dfs_schedules >= DFS_SCHEDULES_PER_VARIANT) {
                // Next workload: a fresh tree, from no preemption again.
                dfs_variant = dfs_variant.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
                dfs_schedules = 0;
                *st = DfsState { bound: 0, stack: Vec::new(), prefix: Vec::new(), exhausted: false };
            }
        }
    }
    out.elapsed = started.elapsed();
    out
}

/// Runs the schedule `choices` of workload `variant` again (from a [`Failure`] or a `--replay`
/// string).
pub fn replay(scenario: &dyn Scenario, variant: u64, choices: &[u32]) -> Result<(), String> {
    // Past the recorded choices (there are none in a complete replay) go earliest-first.
    struct Earliest;
    impl Strategy for Earliest {
        fn choose(&mut self, enabled: &[StepInfo]) -> usize {
            EarliestChooser.choose(enabled)
        }
    }
    run_once(scenario, variant, Box::new(Earliest), choices.to_vec()).2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_strings_round_trip() {
        for choices in
            [vec![], vec![0], vec![0, 0, 0, 0, 5, 1, 1, 40, 0, 0, 0], (0..200).map(|i| (i * 7 % 13) as u32).collect()]
        {
            let s = encode_choices(&choices);
            assert_eq!(decode_choices(&s), Ok(choices.clone()), "{s}");
        }
        assert_eq!(encode_choices(&[0, 0, 0, 0, 37]), "0*4.11");
        assert!(decode_choices("0*4.!").is_err());
        assert_eq!(decode_replay(&encode_replay(12345, &[1, 2, 2, 2])), Ok((12345, vec![1, 2, 2, 2])));
        assert!(decode_replay("nocolon").is_err());
    }
}
