//! The plan's gang placements as slots, and the best way of filling them: a min-cost flow.
//!
//! A gang job on a candidate takes a fixed number of VMs of one offer; call that (offer, VMs) a
//! slot. Once the plan's slots are fixed, which gang job sits in which slot (or waits) is an
//! assignment, and the assignment of the most weight, then the least cost, is a min-cost
//! circulation: source → job (−weight) → slot (+cost) → sink → source. Its optimum moves as many
//! jobs at once as it needs to, where the local moves of `search` change one or two: on
//! tiny-1000-1, HiGHS's optimum differs from our plan in 49 jobs, most of them 1-GPU jobs shifted
//! one place along a chain across regions.
//!
//! The slots themselves are what the quota pools and capacities constrain, and those rows are not
//! a flow (offers of one pool differ in vCPUs). So the slots change one at a time: a slot is added
//! where the negative cycle through it (a shortest path from the sink in the residual graph) gains,
//! and where it fits the free resources, or fits them once the slot that path empties is released.
//! Each change keeps the circulation optimal for the slots it has. Searches after the first run
//! Dijkstra on potentials (the lengths from all nodes at once, by Bellman-Ford, which also finds
//! the negative cycles).
//!
//! A change of one slot never loses weight, and a cheaper plan can need to: on tiny-1000-1 the
//! optimum leaves two priority-3 jobs on V100 VMs waiting to run three priority-2 jobs on T4 VMs in
//! their room. So trades release one slot, or two, whatever they lose (their jobs rerouted, perhaps
//! to waiting), then change slots into the room they left, and are kept only when the whole gains.
//! Filling that room is a knapsack: of two changes of the same weight, a trade takes the one that
//! takes less of the room where the shorter would leave no room for another like it (with both,
//! tiny-1000-1 and -4 reach HiGHS's proven optima from 2.8 % and 5.1 % above them; BENCHMARKS.md,
//! "Trades that fill their room as a knapsack (session 69)").
//!
//! All of it within a work budget counted in queue pops (deterministic), and the deadline.
//! A split job waiting, or placed whole on one offer, is a unit like a gang job (all its GPUs on
//! one offer, or waiting); a split job placed in part keeps its pieces, and the rest of it is a
//! unit; a split job placed whole in pieces stays as it is.
//!
//! The searches are cheap where they need not look: the potential is updated from the nodes whose
//! arcs a change touched (not computed again from all nodes), a group of new slots is skipped
//! where the potential proves no path to them beats the best change so far, and a search stops
//! once none can: a trade tried takes 5-10 times fewer queue pops for it (BENCHMARKS.md, "Split
//! jobs as slots, cheaper trades (session 52)").
//!
//! Measured (BENCHMARKS.md, "Slots re-filled by min-cost flow (session 51)"): of 167 problems of
//! 60-10,000 jobs, 66 plans heavier and 39 cheaper at the same weight, none worse; tiny-1000-1
//! 3.0 % cheaper, issue-10000-1 32 %.
//!
//! Costs are integers (micro-USD) and weights shifted far above them, so the lexicographic
//! objective is one exact number and the shortest-path searches cannot cycle on rounding.

use std::collections::HashMap;
use std::time::Instant;

use crate::model::{Assign, Cand, EPS, Instance, Sol, better};

/// A length in the residual graph: weight (scaled by [`WEIGHT_UNIT`]) and micro-USD in one exact
/// number; less is better.
type Len = i128;

/// One unit of weight, far above any cost in micro-USD (2^64 µUSD is 18 trillion USD).
const WEIGHT_UNIT: Len = 1 << 64;

/// Micro-USD per USD.
const MICRO: f64 = 1e6;

/// Gains below this (in micro-USD) are rounding, not gains: a change or a trade must gain more to be
/// taken (a path's length is a sum of rounded arc costs). Negative cycles are cancelled whatever
/// they gain (see [`Flow::cancel`]).
const MIN_GAIN: Len = 100;

/// Node ids: the source, the sink, then the jobs, then the slots.
const SOURCE: usize = 0;
const SINK: usize = 1;

/// The circulation over the gang jobs and slots, with the resources the slots leave free.
#[derive(Clone)]
struct Flow<'r> {
    /// Per job node: the job, its weight, its candidates as (slot, cost, candidate).
    job: &'r [usize],
    weight: &'r [Len],
    arcs: &'r [Vec<(usize, Len, Cand)>],
    /// Per slot: what one of it uses of each resource (as `Instance::resources` counts them).
    uses: &'r [Vec<(usize, i64)>],
    /// Per job node, the slot it is in (`None`: waiting) and its cost there.
    at: Vec<Option<usize>>,
    at_cost: Vec<Len>,
    /// Per slot: its jobs, and how many it may hold.
    members: Vec<Vec<usize>>,
    cap: Vec<u32>,
    /// Free amount of each resource.
    free: Vec<i64>,
    /// Queue pops of the shortest-path searches so far (the work budget's unit), the most they
    /// may reach, and the deadline: a search that reaches either gives up.
    work: usize,
    limit: usize,
    deadline: Option<Instant>,
    /// Per node, a potential under which no residual arc is negative (first the lengths from all
    /// nodes at once), when `potential_ok`: Dijkstra's searches run on it. A change voids it until
    /// `refresh` updates it from the `dirty` nodes.
    potential: Vec<Len>,
    potential_ok: bool,
    /// Nodes whose arcs out changed since the potential was last current: only from them can an
    /// arc have turned negative under it, so only they start its update.
    dirty: Vec<usize>,
    /// Slots that changes may not add (those a trade released: adding one back undoes it).
    tabu: Vec<usize>,
    /// Where not empty, the resources a new slot must use one of: those a trade released (no other
    /// new slot gains from the release).
    focus: Vec<usize>,
    /// Slots new slots may be besides those on `focus`: where the jobs a trade made wait can go.
    focus_slots: Vec<usize>,
}

impl Flow<'_> {
    fn jobs(&self) -> usize {
        self.job.len()
    }

    fn slots(&self) -> usize {
        self.uses.len()
    }

    fn nodes(&self) -> usize {
        2 + self.jobs() + self.slots()
    }

    fn slot_node(&self, s: usize) -> usize {
        2 + self.jobs() + s
    }

    /// The slot a slot node stands for.
    fn node_slot(&self, node: usize) -> usize {
        node - 2 - self.jobs()
    }

    /// Takes one slot of `s` away, its resources freed (no job may be left in it).
    fn drop_slot(&mut self, s: usize) {
        self.cap[s] -= 1;
        self.give_back(s, 1);
    }

    /// Whether one more slot `b` fits once one slot `e` is released.
    fn fits_after(&self, e: usize, b: usize) -> bool {
        self.uses[b]
            .iter()
            .all(|&(r, q)| q <= self.free[r] + self.uses[e].iter().find(|&&(re, _)| re == r).map_or(0, |&(_, qe)| qe))
    }

    /// Adds `sign` times slot `s`'s resources to the free ones.
    fn give_back(&mut self, s: usize, sign: i64) {
        self.potential_ok = false;
        self.dirty.push(self.slot_node(s));
        for &(r, q) in &self.uses[s] {
            self.free[r] += sign * q;
        }
    }

    /// Calls `f(to, length)` for every arc out of `u` with residual capacity.
    fn for_arcs(&self, u: usize, mut f: impl FnMut(usize, Len)) {
        let jobs = self.jobs();
        match u {
            SOURCE => {
                for (i, at) in self.at.iter().enumerate() {
                    if at.is_none() {
                        f(2 + i, -self.weight[i]);
                    }
                }
            }
            SINK => {
                f(SOURCE, 0);
                for (s, members) in self.members.iter().enumerate() {
                    if !members.is_empty() {
                        f(self.slot_node(s), 0);
                    }
                }
            }
            u if u < 2 + jobs => {
                let i = u - 2;
                let here = self.at[i];
                if here.is_some() {
                    f(SOURCE, self.weight[i]);
                }
                for &(s, cost, _) in &self.arcs[i] {
                    if Some(s) != here {
                        f(self.slot_node(s), cost);
                    }
                }
            }
            u => {
                let s = u - 2 - jobs;
                for &i in &self.members[s] {
                    f(2 + i, -self.at_cost[i]);
                }
                if (self.members[s].len() as u32) < self.cap[s] {
                    f(SINK, 0);
                }
            }
        }
    }

    /// Bellman-Ford (queue-based) from `roots` at length 0: per node its length and predecessor,
    /// or a negative cycle if one is reachable, or nothing when the work runs out.
    fn bellman_ford(&mut self, roots: &[usize]) -> Paths {
        let mut dist = vec![Len::MAX; self.nodes()];
        for &r in roots {
            dist[r] = 0;
        }
        self.label(dist, roots)
    }

    /// Label-correcting from `dist`, the nodes `start` first: lowers labels until no arc is
    /// negative under them (a potential, or shortest lengths when `dist` holds only the roots), or
    /// finds a negative cycle (a cycle of predecessors is one whatever the labels started at).
    fn label(&mut self, mut dist: Vec<Len>, start: &[usize]) -> Paths {
        let n = self.nodes();
        let mut pred = vec![usize::MAX; n];
        let mut queued = vec![false; n];
        let mut queue = std::collections::VecDeque::new();
        for &r in start {
            if !queued[r] {
                queued[r] = true;
                queue.push_back(r);
            }
        }
        let mut relaxed = 0usize;
        let mut updates = Vec::new();
        while let Some(u) = queue.pop_front() {
            self.work += 1;
            if self.work >= self.limit
                || (self.work.is_multiple_of(4096) && self.deadline.is_some_and(|d| Instant::now() >= d))
            {
                self.limit = self.work;
                return Paths::OutOfWork;
            }
            queued[u] = false;
            let du = dist[u];
            updates.clear();
            self.for_arcs(u, |v, len| {
                if du + len < dist[v] {
                    updates.push((v, du + len));
                }
            });
            for &(v, dv) in &updates {
                if dv < dist[v] {
                    dist[v] = dv;
                    pred[v] = u;
                    relaxed += 1;
                    if !queued[v] {
                        queued[v] = true;
                        queue.push_back(v);
                    }
                    // Now and then, look for a cycle among the predecessors: with a negative cycle
                    // the relaxations never end.
                    if relaxed.is_multiple_of(n)
                        && let Some(cycle) = predecessor_cycle(&pred)
                    {
                        return Paths::Cycle(cycle);
                    }
                }
            }
        }
        Paths::Tree(dist, pred)
    }

    /// Sends one unit around `cycle` (nodes in arc order, closing back to the first): the jobs on
    /// it move to the slot (or the waiting) after them.
    fn push(&mut self, cycle: &[usize]) {
        self.potential_ok = false;
        let jobs = self.jobs();
        let k = cycle.len();
        let mut moves = Vec::new();
        for (p, &u) in cycle.iter().enumerate() {
            if (2..2 + jobs).contains(&u) {
                let next = cycle[(p + 1) % k];
                let to = (next >= 2 + jobs).then(|| next - 2 - jobs);
                moves.push((u - 2, to));
            }
        }
        self.dirty.extend_from_slice(cycle);
        self.dirty.extend([SOURCE, SINK]);
        for (i, to) in moves {
            if let Some(s) = self.at[i] {
                self.members[s].retain(|&m| m != i);
                self.dirty.push(self.slot_node(s));
            }
            if let Some(s) = to {
                self.members[s].push(i);
                self.at_cost[i] = self.arcs[i].iter().find(|a| a.0 == s).map_or(0, |a| a.1);
            }
            self.at[i] = to;
        }
    }

    /// The length of a cycle.
    fn length(&self, cycle: &[usize]) -> Len {
        let k = cycle.len();
        let mut total = 0;
        for (p, &u) in cycle.iter().enumerate() {
            let next = cycle[(p + 1) % k];
            let mut found = None;
            self.for_arcs(u, |v, len| {
                if v == next && found.is_none_or(|f| len < f) {
                    found = Some(len);
                }
            });
            total += found.unwrap_or(0);
        }
        total
    }

    /// Cancels negative cycles until there is none (the assignment to the slots is then the best)
    /// or the work is spent; then releases the slots left empty. Returns the gain.
    fn cancel_cycles(&mut self) -> Len {
        let mut gain = 0;
        while let Err(Some(cycle)) = self.refresh() {
            let Some(cut) = self.cancel(&cycle) else { break };
            gain += cut;
        }
        self.trim();
        gain
    }

    /// Sends one unit around `cycle` when that gains: returns the gain, or `None` (nothing sent)
    /// where the cycle is not negative. However little it gains, a negative cycle is cancelled:
    /// lengths are exact integers, so cancelling ends, and a cycle left in place is the first
    /// thing every later search finds, which then gives up (below [`MIN_GAIN`] they were refused
    /// before session 69, and a 90 micro-USD one on tiny-1000-4 stopped all 37 trades).
    fn cancel(&mut self, cycle: &[usize]) -> Option<Len> {
        let length = self.length(cycle);
        if length >= 0 {
            return None;
        }
        self.push(cycle);
        Some(-length)
    }

    /// Makes the potential current: `Err` with a negative cycle where there is one, or without
    /// one where the work ran out.
    fn refresh(&mut self) -> Result<(), Option<Vec<usize>>> {
        if self.potential_ok {
            return Ok(());
        }
        // The last potential, updated from the nodes whose arcs changed; the first, from all.
        let found = if self.potential.len() == self.nodes() {
            let dirty = std::mem::take(&mut self.dirty);
            self.label(self.potential.clone(), &dirty)
        } else {
            self.dirty.clear();
            let all: Vec<usize> = (0..self.nodes()).collect();
            self.bellman_ford(&all)
        };
        match found {
            Paths::Tree(dist, _) => {
                self.potential = dist;
                self.potential_ok = true;
                Ok(())
            }
            Paths::Cycle(cycle) => Err(Some(cycle)),
            Paths::OutOfWork => Err(None),
        }
    }

    /// Shortest paths from `roots` at length 0, by Dijkstra on the potential's reduced lengths
    /// (each node settled once, where Bellman-Ford would go over nodes again and again): as
    /// [`Flow::bellman_ford`].
    fn shortest(&mut self, roots: &[usize]) -> Paths {
        self.shortest_below(roots, None)
    }

    /// [`Flow::shortest`], but where `below` is `(limit, least)` the search stops once no node
    /// whose potential is at least `least` can be reached shorter than `limit` (those it has not
    /// settled then are left unreached): a path of length `l` to `v` has key `l - potential[v]`.
    fn shortest_below(&mut self, roots: &[usize], below: Option<(Len, Len)>) -> Paths {
        match self.refresh() {
            Ok(()) => {}
            Err(Some(cycle)) => return Paths::Cycle(cycle),
            Err(None) => return Paths::OutOfWork,
        }
        let n = self.nodes();
        // A path of length `l` to `v` has key `l - potential[v]`: along an arc the key grows by the
        // arc's reduced length, never negative, so keys settle in order.
        let mut key = vec![Len::MAX; n];
        let mut pred = vec![usize::MAX; n];
        let mut done = vec![false; n];
        let mut heap = std::collections::BinaryHeap::new();
        for &r in roots {
            key[r] = -self.potential[r];
            heap.push(std::cmp::Reverse((key[r], r)));
        }
        let mut updates = Vec::new();
        while let Some(std::cmp::Reverse((k, u))) = heap.pop() {
            if done[u] || k > key[u] {
                continue;
            }
            if below.is_some_and(|(limit, least)| k.saturating_add(least) >= limit) {
                break;
            }
            done[u] = true;
            self.work += 1;
            if self.work >= self.limit
                || (self.work.is_multiple_of(4096) && self.deadline.is_some_and(|d| Instant::now() >= d))
            {
                self.limit = self.work;
                return Paths::OutOfWork;
            }
            updates.clear();
            let pu = self.potential[u];
            self.for_arcs(u, |v, len| updates.push((v, len)));
            for &(v, len) in &updates {
                let kv = k + len + pu - self.potential[v];
                if !done[v] && kv < key[v] {
                    key[v] = kv;
                    pred[v] = u;
                    heap.push(std::cmp::Reverse((kv, v)));
                }
            }
        }
        let dist = (0..n).map(|v| if done[v] { key[v] + self.potential[v] } else { Len::MAX }).collect();
        Paths::Tree(dist, pred)
    }

    /// Goes back to `saved`, keeping the work done since and the limit.
    fn restore(&mut self, saved: &Self) {
        let (work, limit) = (self.work, self.limit);
        *self = saved.clone();
        (self.work, self.limit) = (work, limit);
    }

    /// Releases the slots no job is in.
    fn trim(&mut self) {
        self.potential_ok = false;
        for s in 0..self.slots() {
            while self.cap[s] > self.members[s].len() as u32 {
                self.drop_slot(s);
            }
        }
    }

    /// The best single change of slots: a new slot `b` entered by a shortest path from the source
    /// (a waiting job placed, through a chain) where `b` fits the free resources, or from one of
    /// the plan's slots (emptied and released) whose release makes room for `b`. A shortest path
    /// from all the plan's slots at once would end, for most new slots, at a root whose release
    /// does not make room for them: so the new slots are grouped by the plan's slots whose release
    /// would, and each group gets its own search. Returns the change's length and its path (root
    /// first, `b` last), or a negative cycle found on the way.
    fn best_change(&mut self) -> Result<Option<(Len, Vec<usize>)>, Vec<usize>> {
        let loaded: Vec<usize> = (0..self.slots()).filter(|&s| !self.members[s].is_empty()).collect();
        // Per resource, the loaded slots that use it: a release makes room for `b` only if it
        // frees each resource `b` lacks.
        let mut using: HashMap<usize, Vec<usize>> = HashMap::new();
        for &e in &loaded {
            for &(r, _) in &self.uses[e] {
                using.entry(r).or_default().push(e);
            }
        }
        let mut groups: Vec<(Vec<usize>, Vec<usize>)> = vec![(vec![SOURCE], Vec::new())];
        let mut group_of: HashMap<Vec<usize>, usize> = HashMap::new();
        for b in 0..self.slots() {
            if self.tabu.contains(&b)
                || (!self.focus.is_empty()
                    && !self.focus_slots.contains(&b)
                    && !self.uses[b].iter().any(|(r, _)| self.focus.contains(r)))
            {
                continue;
            }
            let short = self.uses[b].iter().find(|&&(r, q)| q > self.free[r]);
            let roots: Vec<usize> = match short {
                None => {
                    groups[0].1.push(b);
                    loaded.iter().filter(|&&e| e != b).map(|&e| self.slot_node(e)).collect()
                }
                Some((r, _)) => using
                    .get(r)
                    .map(|es| {
                        es.iter().filter(|&&e| e != b && self.fits_after(e, b)).map(|&e| self.slot_node(e)).collect()
                    })
                    .unwrap_or_default(),
            };
            if roots.is_empty() {
                continue;
            }
            let next = groups.len();
            let g = *group_of.entry(roots.clone()).or_insert(next);
            if g == groups.len() {
                groups.push((roots, Vec::new()));
            }
            groups[g].1.push(b);
        }
        match self.refresh() {
            Ok(()) => {}
            Err(Some(cycle)) => return Err(cycle),
            Err(None) => return Ok(None),
        }
        // A path from root `r` to `v` is at least `potential[v] - potential[r]` long (its reduced
        // lengths are not negative): groups that cannot beat the best change so far are skipped,
        // and the searches stop early, the most promising groups first.
        let mut ranked: Vec<(Len, Len, usize)> = groups
            .iter()
            .enumerate()
            .filter(|(_, (_, targets))| !targets.is_empty())
            .map(|(g, (roots, targets))| {
                let least = targets.iter().map(|&b| self.potential[self.slot_node(b)]).min().unwrap_or(Len::MAX);
                let top = roots.iter().map(|&r| self.potential[r]).max().unwrap_or(0);
                (least.saturating_sub(top), least, g)
            })
            .collect();
        ranked.sort();
        // The shortest change, and in a trade the change of the most weight that takes the least
        // of the released room (among those these searches reach).
        let mut best: Option<(Len, Vec<usize>)> = None;
        let mut lean: Option<((Len, i64, Len), Vec<usize>)> = None;
        for &(bound, least, g) in &ranked {
            let (roots, targets) = &groups[g];
            let limit = best.as_ref().map_or(-MIN_GAIN + 1, |(l, _)| (*l).min(-MIN_GAIN + 1));
            if bound >= limit {
                continue;
            }
            let (dist, pred) = match self.shortest_below(roots, Some((limit, least))) {
                Paths::Tree(dist, pred) => (dist, pred),
                Paths::Cycle(cycle) => return Err(cycle),
                Paths::OutOfWork => break,
            };
            for &b in targets {
                let node = self.slot_node(b);
                let d = dist[node];
                if d > -MIN_GAIN {
                    continue;
                }
                if !self.focus.is_empty() && weight_class(d) < 0 {
                    let path = path_to(&pred, node);
                    let key = (weight_class(d), self.room_taken(&self.needs(&path)), d);
                    if lean.as_ref().is_none_or(|(k, _)| key < *k) {
                        lean = Some((key, path));
                    }
                }
                if best.as_ref().is_some_and(|(l, _)| d >= *l) {
                    continue;
                }
                best = Some((d, path_to(&pred, node)));
            }
        }
        // The lean change where the shortest would leave no room for it and it leaves room for
        // another like it: filling released room is a knapsack, where the smaller of two changes
        // of the same weight can leave room for more (tiny-1000-4: an 8-vCPU slot taken for a
        // 1-GPU job left no room for the second 4-vCPU one two released V100 VMs made).
        if let (Some((d, path)), Some((key, lean_path))) = (&best, lean) {
            let shortest = self.needs(path);
            let smaller = self.needs(&lean_path);
            // Whether the smaller change still fits once `taken` is taken.
            let fits_after = |taken: &[(usize, i64)]| {
                smaller.iter().all(|&(r, q)| {
                    q <= self.free[r] - taken.iter().filter(|&&(t, _)| t == r).map(|&(_, x)| x).sum::<i64>()
                })
            };
            if weight_class(*d) == key.0
                && key.1 < self.room_taken(&shortest)
                && !fits_after(&shortest)
                && fits_after(&smaller)
            {
                return Ok(Some((key.2, lean_path)));
            }
        }
        Ok(best)
    }

    /// The resources a change along `path` takes, net of its root's release (negative where the
    /// root frees more than the new slot takes).
    fn needs(&self, path: &[usize]) -> Vec<(usize, i64)> {
        let mut need = self.uses[self.node_slot(path[path.len() - 1])].clone();
        if path[0] != SOURCE {
            for &(r, q) in &self.uses[self.node_slot(path[0])] {
                match need.iter_mut().find(|(t, _)| *t == r) {
                    Some(n) => n.1 -= q,
                    None => need.push((r, -q)),
                }
            }
        }
        need
    }

    /// What a change that needs `need` (see [`Flow::needs`]) takes of the `focus` resources.
    fn room_taken(&self, need: &[(usize, i64)]) -> i64 {
        need.iter().filter(|(r, _)| self.focus.contains(r)).map(|&(_, q)| q).sum()
    }

    /// Takes a new slot at the end of `path` (from [`Flow::best_change`]) and moves the jobs along
    /// it; a slot at its root is released.
    fn change(&mut self, path: &[usize]) {
        let b = self.node_slot(path[path.len() - 1]);
        let root = path[0];
        self.cap[b] += 1;
        self.give_back(b, -1);
        let mut cycle = vec![SINK];
        cycle.extend_from_slice(path);
        self.push(&cycle);
        if root != SOURCE {
            self.drop_slot(self.node_slot(root));
        }
    }

    /// Best changes one after the other while they gain and the work lasts. Returns the gain.
    fn improve(&mut self) -> Len {
        let mut gain = 0;
        while self.work < self.limit {
            match self.best_change() {
                Ok(Some((length, path))) => {
                    self.change(&path);
                    gain -= length;
                }
                Ok(None) => break,
                Err(cycle) => match self.cancel(&cycle) {
                    Some(cut) => gain += cut,
                    None => break,
                },
            }
        }
        gain
    }

    /// Trades, in passes over the plan's slots while a pass keeps one (a trade changes what the
    /// others can do), the dearest per weight first (what a trade saves is what the released jobs
    /// cost). Returns the gain.
    fn trades(&mut self) -> (Len, Trades) {
        let mut gain = 0;
        let mut done = Trades { kept: 0, tried: 0, passes: 0 };
        while self.work < self.limit {
            done.passes += 1;
            let kept = done.kept;
            let dearness = |s: usize| {
                self.members[s].iter().map(|&i| self.at_cost[i] as f64 / self.weight[i] as f64).fold(0.0, f64::max)
            };
            let mut order: Vec<(f64, usize)> =
                (0..self.slots()).filter(|&s| !self.members[s].is_empty()).map(|s| (dearness(s), s)).collect();
            order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let order: Vec<usize> = order.into_iter().map(|(_, s)| s).collect();
            let mut next = 0;
            while next < order.len() && self.work < self.limit {
                let e = order[next];
                if self.members[e].is_empty() {
                    next += 1;
                    continue;
                }
                done.tried += 1;
                match self.trade(e, &order) {
                    // The same slot again: it may have more to give.
                    Some(total) => {
                        gain += total;
                        done.kept += 1;
                    }
                    None => next += 1,
                }
            }
            if done.kept == kept {
                break;
            }
        }
        (gain, done)
    }

    /// A trade: a slot of `e` released (its job rerouted, perhaps to waiting), then the best changes
    /// into the room it leaves; where that does not gain, a second slot released too: another of
    /// `e`'s kind, or one of the first in `order` that shares a resource with it, [`SECOND_RELEASES`]
    /// in all (three lighter jobs in place of two heavier ones of the same weight need two slots of
    /// the heavier kind released at once). Returns the gain, or `None` with the flow as it was.
    fn trade(&mut self, e: usize, order: &[usize]) -> Option<Len> {
        let before = self.clone();
        self.tabu = vec![e];
        self.focus = self.uses[e].iter().map(|&(r, _)| r).collect();
        let mut kept = None;
        if let Some(loss) = self.release(e) {
            let first = self.improve() - loss;
            kept = (first >= MIN_GAIN).then_some(first);
            if kept.is_none() {
                let after_first = self.clone();
                let first_focus = self.focus.clone();
                let shares = |s: usize| self.uses[s].iter().any(|(r, _)| first_focus.contains(r));
                let seconds: Vec<usize> = std::iter::once(e)
                    .chain(order.iter().copied().filter(|&s| s != e && !self.members[s].is_empty() && shares(s)))
                    .take(SECOND_RELEASES)
                    .collect();
                for e2 in seconds {
                    if self.members[e2].is_empty() || self.work >= self.limit {
                        continue;
                    }
                    self.tabu = vec![e, e2];
                    self.focus.clone_from(&first_focus);
                    self.focus.extend(self.uses[e2].iter().map(|&(r, _)| r));
                    let Some(loss) = self.release(e2) else { break };
                    let total = first + self.improve() - loss;
                    if total >= MIN_GAIN {
                        kept = Some(total);
                        break;
                    }
                    self.restore(&after_first);
                }
            }
        }
        self.tabu.clear();
        self.focus.clear();
        self.focus_slots.clear();
        if kept.is_none() {
            self.restore(&before);
        }
        kept
    }

    /// Releases one slot of `e`, its job moved along the cheapest chain that ends with a job
    /// waiting. Returns the change's length (a loss).
    fn release(&mut self, e: usize) -> Option<Len> {
        let root = self.slot_node(e);
        let Paths::Tree(dist, pred) = self.shortest(&[root]) else { return None };
        if dist[SOURCE] == Len::MAX {
            return None;
        }
        let mut path = path_to(&pred, SOURCE);
        // Closed through the sink: the unit that slot `e` sent to it now comes from the source.
        path.push(SINK);
        // The job the release made wait (the last job on the path): its candidates are where the
        // trade's changes may put it.
        let jobs = 2..2 + self.jobs();
        let waits = path.iter().rev().find(|u| jobs.contains(*u)).map(|&u| u - 2);
        self.push(&path);
        self.drop_slot(e);
        if let Some(i) = waits {
            self.focus_slots.extend(self.arcs[i].iter().map(|a| a.0));
        }
        Some(dist[SOURCE])
    }
}

/// The whole units of weight a length gains, negated (a length is weight and money in one number).
fn weight_class(d: Len) -> Len {
    (d + WEIGHT_UNIT / 2).div_euclid(WEIGHT_UNIT)
}

/// What the trades did: how many were kept, tried, and the passes over the slots.
struct Trades {
    kept: usize,
    tried: usize,
    passes: usize,
}

/// A gain as weight and USD, for the trace.
fn show(gain: Len) -> String {
    let weight = (gain + WEIGHT_UNIT / 2).div_euclid(WEIGHT_UNIT);
    format!("{weight:+} weight {:+.2} USD", (weight * WEIGHT_UNIT - gain) as f64 / MICRO)
}

/// What a shortest-path search found.
enum Paths {
    /// Per node, its length from the roots and its predecessor (`usize::MAX` at the roots and where
    /// unreached, told apart by the length).
    Tree(Vec<Len>, Vec<usize>),
    /// A negative cycle, its nodes in arc order.
    Cycle(Vec<usize>),
    /// The work or the time ran out first.
    OutOfWork,
}

/// The path from a search's root to `node` along the predecessors, root first.
fn path_to(pred: &[usize], node: usize) -> Vec<usize> {
    let mut path = vec![node];
    let mut u = node;
    while pred[u] != usize::MAX {
        u = pred[u];
        path.push(u);
    }
    path.reverse();
    path
}

/// The cycle in a predecessor graph, if any, in arc order.
fn predecessor_cycle(pred: &[usize]) -> Option<Vec<usize>> {
    let n = pred.len();
    // 0: unseen, 1: on the walk being followed, 2: done.
    let mut state = vec![0u8; n];
    for start in 0..n {
        if state[start] != 0 {
            continue;
        }
        let mut walk = Vec::new();
        let mut u = start;
        while u != usize::MAX && state[u] == 0 {
            state[u] = 1;
            walk.push(u);
            u = pred[u];
        }
        if u != usize::MAX && state[u] == 1 {
            // The walk follows predecessors: reversed, from `u`, it is the cycle in arc order.
            let from = walk.iter().position(|&x| x == u).unwrap_or(0);
            let mut cycle: Vec<usize> = walk[from..].to_vec();
            cycle.reverse();
            for &x in &walk {
                state[x] = 2;
            }
            return Some(cycle);
        }
        for &x in &walk {
            state[x] = 2;
        }
    }
    None
}

/// Work (queue pops of the shortest-path searches) the re-assignment may take: [`SMALL_WORK`] on up
/// to [`SMALL_JOBS`] jobs, else [`WORK`] plus [`WORK_PER_JOB`] per job, at least [`MIN_WORK`]. A
/// pop costs 0.1-0.2 µs at 1,000 jobs, 0.5 µs or more at 10,000 (every change re-prices all
/// nodes). Most of the gain comes from the cycles, which take little of it (35,000 pops at 1,000
/// diverse jobs, 150,000-440,000 at 10,000); the trades take the rest, and find one in a few dozen
/// tries. At 60 per job, 10,000-job plans took up to 1.9 s as the whole process (the target is
/// 2 s).
const SMALL_JOBS: usize = 300;
const SMALL_WORK: usize = 1_000_000;
const WORK: usize = 100_000;
const WORK_PER_JOB: usize = 40;
/// At 1,000 jobs the trades used all of the 140,000 pops they had before session 68 (on 20 of the
/// 22 independent problems of seeds 1 and 3; one-pool and tiny ended below), and kept gaining with
/// more: of 66 independent 1,000-job problems, at 300,000 pops 41 plans better and none worse for
/// 1.16 times the mean time (149 -> 173 ms, the 90th percentile 196 -> 223); at 600,000, 49
/// better for 1.47 times, a quarter of them above the 0.25 s target (BENCHMARKS.md, "More work
/// for the slots between 300 and 5,000 jobs (session 68)"). From 5,000 jobs on the per-job budget
/// is more.
const MIN_WORK: usize = 300_000;

/// Slots a trade may release second: the first slot's kind again, then the dearest per weight of
/// the slots that share a resource (a quota pool, an offer's capacity) with it. A second slot
/// elsewhere frees room the first's cannot combine with, so its trade is two trades, each of which
/// is tried on its own; the four dearest of the whole plan were tried before (session 64): on the
/// 66 independent 1,000-job problems of seeds 1-6, 15 plans heavier, 2 lighter (by 0.06 % and
/// 0.10 %) and tiny-1000-3 7.6 % cheaper; on 44 of 60-100 jobs, 1 heavier, 1 lighter (0.05 %),
/// 1 cheaper, 3 dearer (0.01-0.66 %); at 10,000 jobs the same plans but one.
const SECOND_RELEASES: usize = 4;

/// A split job as one unit of the flow: per candidate, the VMs that hold all its GPUs not placed
/// in pieces that stay, within its price cap and budget (`Cand` as for a gang job: `gpus` the
/// unit's). A job waiting, or placed whole by one placement, is one unit that can move; a job
/// placed in part keeps its pieces, and its unit is the rest, on offers the pieces are not on (one
/// placement per offer). A job placed whole in pieces stays as it is (no unit). Returns whether
/// the job's placements stay, and the unit's candidates.
fn split_unit(inst: &Instance, sol: &Sol, j: usize) -> (bool, Vec<Cand>) {
    let job = inst.job(j);
    let pieces: Vec<&Assign> = sol.assigns.iter().filter(|a| a.job == j).collect();
    let placed = sol.job_gpus[j];
    let movable = pieces.is_empty() || (pieces.len() == 1 && placed >= job.gpus);
    if !movable && placed >= job.gpus {
        return (true, Vec::new());
    }
    let gpus = if movable { job.gpus } else { job.gpus - placed };
    let (price, spent) = if movable { (0.0, 0.0) } else { (sol.job_price[j], sol.job_cost[j]) };
    let units: Vec<Cand> = inst
        .cands_of(j)
        .iter()
        .filter(|c| movable || pieces.iter().all(|a| a.offer != c.offer))
        .filter_map(|c| {
            let vms = gpus.div_ceil(c.gpus);
            let offer = &inst.p.offers[c.offer];
            let cost = f64::from(vms) * c.cost + c.egress_per_gpu * f64::from(gpus);
            let fits = offer.capacity_vms.is_none_or(|cap| cap >= vms)
                && job.max_price_per_hour.is_none_or(|cap| price + f64::from(vms) * offer.price_per_hour <= cap + EPS)
                && job.budget.is_none_or(|b| spent + cost <= b + EPS);
            fits.then_some(Cand { offer: c.offer, vms, gpus, cost, egress_per_gpu: 0.0 })
        })
        .collect();
    match pieces.first() {
        // Placed whole, but not as a unit would be (more VMs than it needs): left where it is.
        Some(a) if movable && !units.iter().any(|c| c.offer == a.offer && c.vms == a.vms) => (true, Vec::new()),
        _ => (!movable, units),
    }
}

/// Re-assigns the gang jobs of `sol` by min-cost flow over slots, changing slots where the pools
/// allow (see the module's doc). Returns the better plan, or `sol` itself.
pub(crate) fn reassign(inst: &Instance, sol: Sol, deadline: Option<Instant>) -> Sol {
    let n = inst.p.jobs.len();
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return sol;
    }
    let mut slot_id: HashMap<(usize, u32), usize> = HashMap::new();
    let mut slots: Vec<(usize, u32)> = Vec::new();
    let mut job = Vec::new();
    let mut weight = Vec::new();
    let mut arcs = Vec::new();
    let mut node_of = vec![usize::MAX; n];
    // Per job, whether its placements stay as they are (not the flow's to move).
    let mut stays = vec![true; n];
    for (j, node) in node_of.iter_mut().enumerate() {
        let (stay, units) =
            if inst.job(j).gang { (false, inst.cands_of(j).to_vec()) } else { split_unit(inst, &sol, j) };
        // A job with no unit has no placement to move (`split_unit` says the pieces stay).
        stays[j] = stay;
        if units.is_empty() {
            continue;
        }
        *node = job.len();
        job.push(j);
        weight.push(Len::from(inst.job(j).priority) * Len::from(units[0].gpus) * WEIGHT_UNIT);
        let mine: Vec<(usize, Len, Cand)> = units
            .iter()
            .map(|c| {
                let next = slots.len();
                let s = *slot_id.entry((c.offer, c.vms)).or_insert(next);
                if s == slots.len() {
                    slots.push((c.offer, c.vms));
                }
                (s, (c.cost * MICRO).round() as Len, *c)
            })
            .collect();
        arcs.push(mine);
    }
    if job.len() < 2 {
        return sol;
    }
    let (mut free, offer_res) = inst.resources();
    let uses: Vec<Vec<(usize, i64)>> =
        slots.iter().map(|&(o, vms)| offer_res[o].iter().map(|&(r, q)| (r, q * i64::from(vms))).collect()).collect();
    let mut at = vec![None; job.len()];
    let mut members = vec![Vec::new(); slots.len()];
    let mut cap = vec![0u32; slots.len()];
    for a in &sol.assigns {
        for &(r, q) in &offer_res[a.offer] {
            free[r] -= q * i64::from(a.vms);
        }
        let i = node_of[a.job];
        if stays[a.job] {
            continue;
        }
        let Some(&s) = slot_id.get(&(a.offer, a.vms)) else { return sol };
        at[i] = Some(s);
        members[s].push(i);
        cap[s] += 1;
    }
    let at_cost = (0..job.len())
        .map(|i| at[i].map_or(0, |s| arcs[i].iter().find(|a: &&(usize, Len, Cand)| a.0 == s).map_or(0, |a| a.1)))
        .collect();
    let mut flow = Flow {
        job: &job,
        weight: &weight,
        arcs: &arcs,
        uses: &uses,
        at,
        at_cost,
        members,
        cap,
        free,
        work: 0,
        potential: Vec::new(),
        potential_ok: false,
        dirty: Vec::new(),
        limit: if n <= SMALL_JOBS { SMALL_WORK } else { (WORK + WORK_PER_JOB * n).max(MIN_WORK) },
        deadline,
        tabu: Vec::new(),
        focus: Vec::new(),
        focus_slots: Vec::new(),
    };
    let mut gain = flow.cancel_cycles();
    let cycles = gain;
    let cycles_work = flow.work;
    gain += flow.improve();
    let single = gain - cycles;
    let single_work = flow.work - cycles_work;
    let (traded, trades) = flow.trades();
    gain += traded;
    let mut out = Sol::new(inst);
    for a in &sol.assigns {
        if stays[a.job] {
            out.take(inst, *a);
        }
    }
    for (i, at) in flow.at.iter().enumerate() {
        if let Some(s) = *at {
            let (_, _, c) = arcs[i].iter().find(|a| a.0 == s).copied().expect("a job's slot is its candidate");
            out.take(inst, Assign { job: job[i], offer: c.offer, vms: c.vms, gpus: c.gpus, cost: c.cost });
        }
    }
    crate::trace(|| {
        format!(
            "slots: gained {} (cycles {} in {cycles_work} pops, single changes {} in {single_work}, {} trades of {} in {} passes {}), work {}: {} cost {:.2} (was {} cost {:.2})",
            show(gain),
            show(cycles),
            show(single),
            trades.kept,
            trades.tried,
            trades.passes,
            show(traded),
            flow.work,
            out.weight(inst),
            out.cost(),
            sol.weight(inst),
            sol.cost()
        )
    });
    if better((out.weight(inst), out.cost()), (sol.weight(inst), sol.cost())) { out } else { sol }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{DiverseParams, diverse};
    use crate::problem::Problem;

    /// The dear job's chain (x east → west, y west → central, j north → east) is one change of
    /// slots: northeurope's released, centralus's taken, and the jobs shifted along the path.
    #[test]
    fn a_chain_of_moves_is_one_change_of_slots() {
        let p = crate::search::tests::dear_job_behind_a_chain();
        let inst = Instance::new(&p);
        let sol = crate::search::tests::dear_job_chain_at_its_worst(&inst);
        let out = reassign(&inst, sol, None);
        assert_eq!(out.weight(&inst), 3.0);
        assert!((out.cost() - 15.0).abs() < 1e-6, "cost {}", out.cost());
    }

    /// A regular one-GPU offer, its family named after its size (no family quota: only the
    /// region's `cores` pool binds).
    fn offer(region: &str, size: &str, model: &str, vcpus: u32, price: f64) -> String {
        format!(
            r#"{{"region": "{region}", "size": "{size}", "priority": "regular", "gpu_model": "{model}",
                "gpus_per_vm": 1, "vcpus_per_vm": {vcpus}, "family": "{size}Family", "price_per_hour": {price}}}"#
        )
    }

    /// A one-GPU gang job on one GPU model.
    fn job(id: &str, model: &str, priority: u32, hours: f64) -> String {
        format!(
            r#"{{"id": "{id}", "gpus": 1, "gpu_models": ["{model}"], "priority": {priority}, "duration_hours": {hours}}}"#
        )
    }

    /// The problem of `offers` and `jobs` under each region's `cores` quota.
    fn one_gpu_problem(offers: &[String], cores: &[(&str, u32)], jobs: &[String]) -> Problem {
        let quotas: Vec<String> = cores
            .iter()
            .map(|(region, vcpus)| format!(r#"{{"region": "{region}", "pool": "cores", "vcpus": {vcpus}}}"#))
            .collect();
        let json = format!(
            r#"{{"offers": [{}], "quotas": [{}], "jobs": [{}]}}"#,
            offers.join(", "),
            quotas.join(", "),
            jobs.join(", ")
        );
        Problem::from_json_str(&json).expect("valid problem")
    }

    /// One heavy, dear job on a large VM (priority 2, 10 USD) against two light ones that fit in
    /// the same 8 vCPUs on small VMs (priority 1 each, 1 USD): the trade keeps the weight and
    /// saves 8 USD; no change of one slot does (the small VMs do not fit beside the large one).
    #[test]
    fn a_trade_replaces_a_heavy_dear_job_by_two_light_cheap_ones() {
        let p = one_gpu_problem(
            &[offer("eastus", "Standard_Big", "A10", 8, 10.0), offer("eastus", "Standard_Small", "T4", 4, 1.0)],
            &[("eastus", 8)],
            &[job("heavy", "A10", 2, 1.0), job("a", "T4", 1, 1.0), job("b", "T4", 1, 1.0)],
        );
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        sol.place(&inst, 0, inst.cands_of(0));
        assert_eq!((sol.weight(&inst), sol.cost()), (2.0, 10.0));
        let out = reassign(&inst, sol, None);
        assert_eq!(out.weight(&inst), 2.0);
        assert!((out.cost() - 2.0).abs() < 1e-6, "cost {}", out.cost());
        assert_eq!(out.job_gpus, vec![0, 1, 1]);
    }

    /// A swap worth 50 micro-USD (less than [`MIN_GAIN`]) in westus, and in eastus the trade of
    /// `a_trade_replaces_a_heavy_dear_job_by_two_light_cheap_ones`: the swap's cycle is cancelled
    /// like any other (lengths are exact integers, so cancelling cannot cycle). Refused as too
    /// small, it stayed the first thing every later search found, and no trade was tried at all
    /// (tiny-1000-4: a 90 micro-USD cycle blocked all 37).
    #[test]
    fn a_cycle_too_small_to_matter_blocks_no_trade() {
        let p = one_gpu_problem(
            &[
                offer("eastus", "Standard_Big", "A10", 8, 10.0),
                offer("eastus", "Standard_Small", "T4", 4, 1.0),
                offer("westus", "Standard_V_A", "V100", 4, 1.0),
                offer("westus", "Standard_V_B", "V100", 2, 1.0001),
            ],
            &[("eastus", 8), ("westus", 6)],
            &[
                job("heavy", "A10", 2, 1.0),
                job("a", "T4", 1, 1.0),
                job("b", "T4", 1, 1.0),
                job("x", "V100", 1, 1.5),
                job("y", "V100", 1, 1.0),
            ],
        );
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        sol.place(&inst, 0, inst.cands_of(0));
        // x on the dearer V100 offer, y on the cheaper: swapping them saves 0.0001 × 0.5 USD (the
        // smaller VM is dearer, so neither offer is dropped as dominated; both on the larger do
        // not fit).
        let on = |j: usize, size: &str| {
            let c: Vec<Cand> = inst.cands_of(j).iter().filter(|c| p.offers[c.offer].size == size).copied().collect();
            assert_eq!(c.len(), 1);
            c
        };
        sol.place(&inst, 3, &on(3, "Standard_V_B"));
        sol.place(&inst, 4, &on(4, "Standard_V_A"));
        assert_eq!(sol.weight(&inst), 4.0);
        let out = reassign(&inst, sol, None);
        assert_eq!(out.weight(&inst), 4.0);
        assert_eq!(out.job_gpus, vec![0, 1, 1, 1, 1]);
        assert!((out.cost() - (2.0 + 1.5 + 1.0001)).abs() < 1e-6, "cost {}", out.cost());
    }

    /// Two released vCPUs' worth of room filled as a knapsack: the heavy job's 8 vCPUs released,
    /// the cheapest change puts a 1-GPU job on an 8-vCPU VM (0.9 USD) and leaves no room for the
    /// second, so the trade would lose weight; the lean change takes a 4-vCPU VM (1 USD) and the
    /// second job fits beside it: the same weight for 2 USD instead of 10.
    #[test]
    fn a_trade_fills_the_released_room_with_the_smaller_of_two_equal_changes() {
        let p = one_gpu_problem(
            &[
                offer("eastus", "Standard_Big", "A10", 8, 10.0),
                offer("eastus", "Standard_T4_8", "T4", 8, 0.9),
                offer("eastus", "Standard_T4_4", "T4", 4, 1.0),
            ],
            &[("eastus", 8)],
            &[job("heavy", "A10", 2, 1.0), job("a", "T4", 1, 1.0), job("b", "T4", 1, 1.0)],
        );
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        sol.place(&inst, 0, inst.cands_of(0));
        assert_eq!((sol.weight(&inst), sol.cost()), (2.0, 10.0));
        let out = reassign(&inst, sol, None);
        assert_eq!(out.weight(&inst), 2.0);
        assert!((out.cost() - 2.0).abs() < 1e-6, "cost {}", out.cost());
        assert_eq!(out.job_gpus, vec![0, 1, 1]);
    }

    /// A split job placed whole is a unit in the flow like a gang job: a gang job on eastus's only
    /// room moves to dearer westus, and the split job, allowed only in eastus, takes its place
    /// (weight 3 + 15). With split jobs left where they are, the gang job's move gains nothing.
    #[test]
    fn a_waiting_split_job_takes_a_gang_jobs_place_as_one_unit() {
        let offer = |region: &str, price: f64| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_V", "priority": "regular", "gpu_model": "V100",
                    "gpus_per_vm": 1, "vcpus_per_vm": 4, "family": "standardVFamily", "price_per_hour": {price}}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}],
                "quotas": [{{"region": "eastus", "pool": "cores", "vcpus": 12}},
                           {{"region": "westus", "pool": "cores", "vcpus": 16}}],
                "jobs": [{{"id": "gang", "gpus": 3, "gpu_models": ["V100"], "priority": 1, "duration_hours": 1}},
                         {{"id": "split", "gpus": 3, "gpu_models": ["V100"], "gang": false, "priority": 5,
                           "duration_hours": 1, "regions": ["eastus"]}}]}}"#,
            offer("eastus", 1.0),
            offer("westus", 2.0),
        );
        let p = Problem::from_json_str(&json).expect("valid problem");
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        sol.place(&inst, 0, inst.cands_of(0));
        assert_eq!((sol.weight(&inst), sol.cost()), (3.0, 3.0));
        let out = reassign(&inst, sol, None);
        let plan = crate::finish(&inst, &out, "slots", &[], Instant::now());
        crate::check::check(&p, &plan).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(out.job_gpus, vec![3, 3]);
        assert_eq!(out.weight(&inst), 18.0);
        assert!((out.cost() - 9.0).abs() < 1e-6, "cost {}", out.cost());
    }

    /// A split job placed in part keeps its pieces, and the rest of it is a unit: eastus holds 2
    /// of its 4 GPUs; the other 2 go to westus once the gang job there moves to dearer centralus
    /// (weight 2 + 10 -> 2 + 20).
    #[test]
    fn the_rest_of_a_split_job_placed_in_part_is_a_unit() {
        let offer = |region: &str, price: f64, cap: &str| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_V", "priority": "regular", "gpu_model": "V100",
                    "gpus_per_vm": 1, "vcpus_per_vm": 4, "family": "standardVFamily", "price_per_hour": {price}
                    {cap}}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}, {}],
                "quotas": [{{"region": "westus", "pool": "cores", "vcpus": 8}},
                           {{"region": "centralus", "pool": "cores", "vcpus": 8}}],
                "jobs": [{{"id": "gang", "gpus": 2, "gpu_models": ["V100"], "priority": 1, "duration_hours": 1,
                           "regions": ["westus", "centralus"]}},
                         {{"id": "split", "gpus": 4, "gpu_models": ["V100"], "gang": false, "priority": 5,
                           "duration_hours": 1, "regions": ["eastus", "westus"]}}]}}"#,
            offer("eastus", 1.0, r#", "capacity_vms": 2"#),
            offer("westus", 1.0, ""),
            offer("centralus", 3.0, ""),
        );
        let p = Problem::from_json_str(&json).expect("valid problem");
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        sol.place(&inst, 0, inst.cands_of(0));
        sol.place(&inst, 1, inst.cands_of(1));
        assert_eq!((sol.job_gpus.clone(), sol.weight(&inst)), (vec![2, 2], 12.0));
        let out = reassign(&inst, sol, None);
        let plan = crate::finish(&inst, &out, "slots", &[], Instant::now());
        crate::check::check(&p, &plan).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(out.job_gpus, vec![2, 4]);
        assert_eq!(out.weight(&inst), 22.0);
        let mut split: Vec<(&str, u32)> =
            out.assigns.iter().filter(|a| a.job == 1).map(|a| (p.offers[a.offer].region.as_str(), a.gpus)).collect();
        split.sort();
        assert_eq!(split, vec![("eastus", 2), ("westus", 2)]);
    }

    /// On diverse problems, from the greedy plan: the re-assigned plan passes the independent
    /// check and is never lighter, nor dearer at the same weight.
    #[test]
    fn reassigned_plans_are_feasible_and_never_worse() {
        let mut improved = 0;
        for seed in 1..=6 {
            let p = diverse(&DiverseParams::new(120, seed));
            let inst = Instance::new(&p);
            let sol = crate::greedy(&inst);
            let (w, c) = (sol.weight(&inst), sol.cost());
            let out = reassign(&inst, sol, None);
            let plan = crate::finish(&inst, &out, "slots", &[], Instant::now());
            crate::check::check(&p, &plan).unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
            let (w2, c2) = (out.weight(&inst), out.cost());
            assert!(w2 > w - 0.5, "seed {seed}: weight {w} -> {w2}");
            assert!(w2 > w + 0.5 || c2 <= c + 1e-6, "seed {seed}: cost {c} -> {c2} at weight {w}");
            improved += usize::from(better((w2, c2), (w, c)));
        }
        assert!(improved > 0, "the greedy plan is improved on some seed");
    }

    /// The same on the independent generator's problems (`tests/data`, from
    /// `benches/independent_problems.py`: 1-GPU queues, all-spot, budgets, split jobs), from the
    /// greedy plan: feasible, never worse, and better on every one.
    #[test]
    fn independent_problems_stay_feasible_and_get_better() {
        let cases = [
            ("tiny-100-3", include_str!("../tests/data/tiny-100-3.json")),
            ("tiny-1000-1", include_str!("../tests/data/tiny-1000-1.json")),
            ("all-spot-300-2", include_str!("../tests/data/all-spot-300-2.json")),
            ("budgets-100-2", include_str!("../tests/data/budgets-100-2.json")),
            ("split-60-1", include_str!("../tests/data/split-60-1.json")),
            ("min-gpus-1000-1", include_str!("../tests/data/min-gpus-1000-1.json")),
        ];
        for (case, json) in cases {
            let p = Problem::from_json_str(json).expect("a valid problem");
            let inst = Instance::new(&p);
            let sol = crate::greedy(&inst);
            let (w, c) = (sol.weight(&inst), sol.cost());
            let out = reassign(&inst, sol, None);
            let plan = crate::finish(&inst, &out, "slots", &[], Instant::now());
            crate::check::check(&p, &plan).unwrap_or_else(|e| panic!("{case}: {e:?}"));
            assert!(better((out.weight(&inst), out.cost()), (w, c)), "{case}: {w} at {c:.2}, still");
        }
    }
}
