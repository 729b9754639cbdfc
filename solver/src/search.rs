//! Plans without an LP, for queues whose jobs do not repeat: the Lagrangian heuristic (jobs in the
//! order of their weight net of the multipliers' prices, each on the candidate whose resources are
//! priced lowest) and local search on gang jobs, which only ever keeps a change that places more
//! weight (weight phase) or the same weight for less (cost phase):
//! - insert: an unplaced job on its cheapest candidate that has room;
//! - eject: an unplaced job on a candidate that lacks room, after removing placed jobs of less weight
//!   that hold the missing quota or capacity, which are then placed elsewhere if they fit (an
//!   ejection chain of depth one);
//! - drop one, add many: a placed job removed to make room for several unplaced jobs worth more;
//! - make room (in the kicks of [`Packing::kick_making_room`]): placed jobs moved, none taken
//!   out, to other candidates of their own, each after making room there the same way if need
//!   be, and split jobs' pieces moved whole to offers with room, until an unplaced job fits
//!   (`make_room`: a chain of relocations); in some of those kicks
//!   also the one job, of any weight, that holds an unplaced job's room moved where lighter jobs
//!   make way for it (`relocate_ejecting`);
//! - place a split job: what a non-gang job still needs, on one of its candidates, after taking out
//!   lighter holders (gang jobs, placed elsewhere if they fit, or other split jobs' pieces); above
//!   100 jobs a piece gives up only the VMs needed, the job takes part of what it needs where all
//!   does not fit or its price cap or budget allows only part, and a job under a cap or budget is
//!   placed again cheapest per GPU first (see [`Packing::respread_split`]);
//! - relocate and swap (cost phase): a job moved to a cheaper candidate, if need be after moving the
//!   job that holds its room elsewhere;
//! - re-fill an offer (cost phase, `repack`): the gang jobs on one offer and those waiting for it
//!   chosen again by a knapsack over its VMs, a set of jobs for another set;
//! - make room for a dear job (last, [`Packing::improve_cost_making_room`]): a job placed far
//!   above its cheapest candidate moved to a cheaper one after a chain of moves, the cheapest per
//!   room freed first, that together cost less than the move saves.
//!
//! Iterated search on top of both phases (many times on small problems; on large ones four times,
//! then twenty times searching only near what each kick moved): kicks (jobs removed, on 101-400
//! jobs split jobs' pieces too, or one forced in whatever it displaces) followed by the search
//! again, across plateaus of equal weight.
//!
//! Non-gang jobs keep the placements they come in with (the `Sol` methods place and re-place them),
//! except that an ejection may take one of their placements (a piece: some VMs of one offer) out
//! when a heavier job needs its room (above 100 jobs only the VMs it needs: the rest is put back on
//! the piece's offer first), its GPUs then placed again where there is room and the rest counted
//! lost, and that room-making may move a piece whole; what is left of a job is placed
//! again, where there is room, when the plan is rebuilt.

mod no_room;
mod repack;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::rc::Rc;
use std::time::Instant;

use no_room::{Look, NoRoom};

use crate::model::{Assign, Cand, EPS, Instance, Sol};

const NONE: u32 = u32::MAX;

/// The search looks at the clock every this many steps (a step of the weight search on 10,000 jobs
/// can take a millisecond; reading the clock costs tens of nanoseconds).
const CLOCK_EVERY: usize = 4;

/// Passes of the weight search over all jobs at most (each pass that helps places more weight).
const MAX_PASSES: usize = 4;

/// Gang placements over the resources left by fixed (non-gang) placements.
#[derive(Clone)]
pub(crate) struct Packing<'i, 'a> {
    inst: &'i Instance<'a>,
    /// Free amount of each resource: quota pools first, then every offer's capacity in VMs.
    free: Vec<i64>,
    /// What no move changes, shared by a packing and its clones: a kick clones the packing it
    /// starts from, and on 10,000 jobs the frame is megabytes in ten thousand lists.
    frame: Rc<Frame>,
    /// Per job, the index of its candidate in its class, or `NONE`.
    slot: Vec<u32>,
    /// Gang jobs placed on each offer, and per placed job its index in its offer's list (so that
    /// taking a job out does not scan a list that holds thousands on a busy offer).
    on_offer: Vec<Vec<usize>>,
    at: Vec<u32>,
    /// Non-gang placements (pieces), kept as they are unless an ejection takes one out.
    fixed: Vec<Assign>,
    /// Per piece, whether an ejection took it out; per offer, the pieces on it.
    out: Vec<bool>,
    pieces_on: Vec<Vec<usize>>,
    /// Per job, its pieces (taken out or not).
    pieces_of: Vec<Vec<usize>>,
    /// What the weight search does besides its moves to make room for a waiting job.
    room: RoomMaking,
    /// Whether split jobs' pieces are taken in part: an ejection trims a piece to the VMs it must
    /// give up, a split job short of GPUs takes part of what it needs, and one under a price cap or
    /// budget is placed again cheapest per GPU first (above [`PART_PIECES_ABOVE`] jobs).
    part_pieces: bool,
    /// The fingerprints of `free` and of which jobs and pieces are where (see `no_room`).
    state: u64,
    layout: u64,
    /// The inserts (by `state`), relocations and ejections (by `layout`) known to fail, per shape.
    no_room: NoRoom,
}

/// What a packing knows of its instance that no move changes (only [`Packing::guide`] does).
#[derive(Clone)]
struct Frame {
    /// Per offer, the resources one VM uses and how much of each.
    offer_res: Vec<Vec<(usize, i64)>>,
    /// Per resource, the offers that use it.
    res_offers: Vec<Vec<usize>>,
    /// Gang jobs, in the order the weight phase tries to place them: most weight first.
    order: Vec<usize>,
    /// Split jobs, highest priority first (then input order).
    splits: Vec<usize>,
    /// Per job, its position in `order`.
    rank: Vec<usize>,
    /// Per resource, the gang jobs with a candidate that uses it, in `order`.
    res_jobs: Vec<Vec<usize>>,
    /// Per job, whether ejecting others for it is worth trying: its weight net of the prices of the
    /// resources it would use is not far below zero (the LP would nearly place it).
    promising: Vec<bool>,
    /// Per job, the candidates ejection and relocation try: those whose resources the prices rate
    /// cheapest (all of them until `guide` is called).
    tried: Vec<Vec<u32>>,
}

/// What the weight search does, besides its other moves, to make room for a waiting job.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RoomMaking {
    /// Nothing.
    Off,
    /// Chains of relocations ([`Packing::make_room`]).
    Chains,
    /// Also the one job that holds the room relocated after lighter ones make way where it goes
    /// ([`Packing::relocate_ejecting`]), and ejections that count a job able to move away as not
    /// lost ([`Packing::lost_weight`]).
    ChainsAndEjections,
}

/// What an ejection makes room for: a gang job's candidate, or a split job's new piece.
#[derive(Clone, Copy)]
enum Target {
    Gang(usize, usize),
    Piece(Assign),
}

/// Jobs above which split jobs' pieces are taken in part ([`Packing::part_pieces`]). At 1,000
/// jobs with every job split (a shape the independent generator does not draw), plans 0.5-3.8 %
/// heavier; at 60-100 jobs, where the exact search and the neighbourhoods place split jobs in
/// whole VMs anyway, the local search's other path cost time (split-100-11 1.7 times) for no
/// weight (BENCHMARKS.md, "Split jobs' pieces taken in part (session 65)"). The neighbourhood
/// search's limit (`neighbourhood::MAX_JOBS`), not named here: `neighbourhood` uses this module.
const PART_PIECES_ABOVE: usize = 100;

/// Jobs up to which kicks take split jobs' pieces out too. With every job split, at 200-400 jobs
/// plans 0.1-7.8 % heavier (tight-caps-400-21 from 0.836 to 0.913 of HiGHS's plan, issue-200-21 from
/// 0.947 to 0.981) for 1.6-12 times the time (0.2 -> 2.7 s); at 1,000 jobs 0-0.5 % heavier for 2-3
/// times the time, above the 250 ms a 1,000-job plan has.
const PIECE_KICKS_UP_TO: usize = 400;

/// Ejections a split job placed again from scratch ([`Packing::respread_split`]) may make for
/// itself.
const RESPREAD_EJECTIONS: usize = 3;

/// Which offers [`Packing::place_split`] may put pieces on.
#[derive(Clone, Copy)]
enum OfferFilter {
    Only(usize),
    Except(usize),
    /// All of the job's candidates, cheapest per GPU first (money, not the multipliers' prices):
    /// where a price cap or budget binds, the GPUs it buys.
    CheapestPerGpu,
}

/// Waiting jobs per resource a local kick's search looks at (see [`Packing::kick_local`]).
pub(crate) const LOCAL_PER_RESOURCE: usize = 100;

/// Holders [`Packing::make_room`] tries to move per step (half as many at the chain's last
/// level), and candidates of the waiting job it makes room on (the first in `tried`).
const ROOM_HOLDERS: usize = 12;
const ROOM_CANDIDATES: usize = 3;

/// Moves [`Packing::make_room`] may try for one waiting job, over all its candidates and levels:
/// most chains fail, and each try costs a fit check or a level of search. On the 33 independent
/// 60-300-job problems 1,000 found the same plan where it mattered (tiny-100) for 1.21 times the
/// time of the search without it, against 1.15 for 400.
const ROOM_BUDGET: usize = 400;

/// Jobs [`Packing::improve_cost_making_room`] tries per pass, the dearest: on a 300-job queue of
/// 1-GPU jobs hundreds are above its threshold, and each try can cost [`ROOM_BUDGET`] moves.
const DEAR_JOBS: usize = 24;

/// Unplaced jobs per resource that "drop one, add many" tries to fill a freed room with.
const MAX_NEIGHBOURS: usize = 48;

/// Placed jobs, the lightest, that an ejection considers removing.
const MAX_HOLDERS: usize = 48;

/// Candidates per job that ejection and relocation try once prices guide them: trying all 40 of a
/// job's candidates costs 7 times as much for little more weight.
const TRIED_CANDIDATES: usize = 6;

impl<'i, 'a> Packing<'i, 'a> {
    /// The gang placements of `sol` (its non-gang ones stay fixed).
    pub fn from_sol(inst: &'i Instance<'a>, sol: &Sol) -> Self {
        let p = inst.p;
        let (free, offer_res) = inst.resources();
        let mut res_offers = vec![Vec::new(); free.len()];
        for (o, res) in offer_res.iter().enumerate() {
            for &(r, _) in res {
                res_offers[r].push(o);
            }
        }
        let mut order: Vec<usize> = (0..p.jobs.len()).filter(|&j| p.jobs[j].gang).collect();
        order.sort_by(|&a, &b| weight(inst, b).total_cmp(&weight(inst, a)).then(a.cmp(&b)));
        let mut splits: Vec<usize> = (0..p.jobs.len()).filter(|&j| !p.jobs[j].gang).collect();
        splits.sort_by_key(|&j| (std::cmp::Reverse(p.jobs[j].priority), j));
        let mut rank = vec![usize::MAX; p.jobs.len()];
        let mut res_jobs: Vec<Vec<usize>> = vec![Vec::new(); free.len()];
        for (pos, &j) in order.iter().enumerate() {
            rank[j] = pos;
            for c in inst.cands_of(j) {
                for &(r, _) in &offer_res[c.offer] {
                    if res_jobs[r].last() != Some(&j) {
                        res_jobs[r].push(j);
                    }
                }
            }
        }
        let frame = Frame {
            offer_res,
            res_offers,
            splits,
            order,
            rank,
            res_jobs,
            promising: vec![true; p.jobs.len()],
            tried: (0..p.jobs.len()).map(|j| (0..inst.cands_of(j).len() as u32).collect()).collect(),
        };
        let mut pack = Packing {
            inst,
            free,
            frame: Rc::new(frame),
            slot: vec![NONE; p.jobs.len()],
            on_offer: vec![Vec::new(); p.offers.len()],
            at: vec![NONE; p.jobs.len()],
            fixed: Vec::new(),
            out: Vec::new(),
            pieces_on: vec![Vec::new(); p.offers.len()],
            pieces_of: vec![Vec::new(); p.jobs.len()],
            room: RoomMaking::Off,
            part_pieces: p.jobs.len() > PART_PIECES_ABOVE,
            state: 0,
            layout: 0,
            no_room: NoRoom::default(),
        };
        pack.state = pack.free.iter().enumerate().fold(0, |h, (r, &f)| h ^ no_room::term(r, f));
        for a in &sol.assigns {
            if p.jobs[a.job].gang {
                let k = inst.cands_of(a.job).iter().position(|c| c.offer == a.offer).expect("a placed candidate");
                pack.put(a.job, k);
            } else {
                pack.add_piece(*a);
            }
        }
        pack
    }

    /// Orders the jobs by their weight net of the resources' prices at `price` (per VM of each
    /// offer), and marks as promising those within a quarter of their weight of being worth placing.
    pub fn guide(&mut self, price: &[f64]) {
        let inst = self.inst;
        // The relocations known to fail were tried on the candidates `tried` held until now.
        self.no_room = NoRoom::default();
        let frame = Rc::make_mut(&mut self.frame);
        let net: Vec<f64> = (0..inst.p.jobs.len())
            .map(|j| {
                let w = weight(inst, j);
                inst.cands_of(j).iter().map(|c| w - f64::from(c.vms) * price[c.offer]).fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        for (j, &n) in net.iter().enumerate() {
            frame.promising[j] = n > -0.25 * weight(inst, j);
            let cands = inst.cands_of(j);
            let mut order: Vec<u32> = (0..cands.len() as u32).collect();
            // A split job's candidates by the price per GPU of their VMs.
            let per = |k: u32| {
                if inst.job(j).gang {
                    f64::from(cands[k as usize].vms)
                } else {
                    1.0 / f64::from(cands[k as usize].gpus)
                }
            };
            let key = |k: u32| per(k) * price[cands[k as usize].offer];
            order.sort_by(|&a, &b| key(a).total_cmp(&key(b)).then(a.cmp(&b)));
            order.truncate(TRIED_CANDIDATES);
            frame.tried[j] = order;
        }
        frame.order.sort_by(|&a, &b| net[b].total_cmp(&net[a]).then(a.cmp(&b)));
        for (pos, &j) in frame.order.iter().enumerate() {
            frame.rank[j] = pos;
        }
        let rank = &frame.rank;
        for list in &mut frame.res_jobs {
            list.sort_unstable_by_key(|&j| rank[j]);
        }
    }

    /// The packing as a plan ([`Packing::to_sol`]) with waiting split jobs placed again where there
    /// is room: what the searches hand on (a packing of more weight can give a plan of less).
    pub fn to_plan(&self) -> Sol {
        let mut sol = self.to_sol();
        sol.improve(self.inst);
        sol
    }

    /// The plan: fixed placements, then the gang placements in job order.
    pub fn to_sol(&self) -> Sol {
        let inst = self.inst;
        let mut sol = Sol::new(inst);
        // A split job's pieces on one offer as one placement, on as few VMs as hold its GPUs there:
        // pieces placed one after the other can each end in a partly idle VM (three of 2 GPUs on
        // 4-GPU VMs), and a placement has at most one.
        let mut merged: Vec<Assign> = Vec::new();
        let mut at: HashMap<(usize, usize), usize> = HashMap::new();
        for (a, &out) in self.fixed.iter().zip(&self.out) {
            if out {
                continue;
            }
            match at.entry((a.job, a.offer)) {
                Entry::Occupied(i) => {
                    let m = &mut merged[*i.get()];
                    m.vms += a.vms;
                    m.gpus += a.gpus;
                    m.cost += a.cost;
                }
                Entry::Vacant(v) => {
                    v.insert(merged.len());
                    merged.push(*a);
                }
            }
        }
        for mut a in merged {
            let needed = a.gpus.div_ceil(inst.p.offers[a.offer].gpus_per_vm);
            if needed < a.vms
                && let Some(c) = inst.candidate(a.job, a.offer)
            {
                a.vms = needed;
                a.cost = f64::from(needed) * c.cost + c.egress_per_gpu * f64::from(a.gpus);
            }
            sol.take(inst, a);
        }
        for (j, &k) in self.slot.iter().enumerate() {
            if k != NONE {
                let c = &inst.cands_of(j)[k as usize];
                sol.take(inst, Assign { job: j, offer: c.offer, vms: c.vms, gpus: c.gpus, cost: c.cost });
            }
        }
        sol
    }

    fn cand(&self, j: usize, k: usize) -> &'i Cand {
        &self.inst.cands_of(j)[k]
    }

    /// The resources candidate `c` lacks room in, and by how much.
    fn lacks(&self, c: &Cand) -> Vec<(usize, i64)> {
        self.lacks_vms(c.offer, c.vms)
    }

    /// The resources `vms` VMs of `offer` lack room in, and by how much.
    fn lacks_vms(&self, offer: usize, vms: u32) -> Vec<(usize, i64)> {
        let vms = i64::from(vms);
        self.frame.offer_res[offer]
            .iter()
            .filter_map(|&(r, a)| {
                let d = a * vms - self.free[r];
                (d > 0).then_some((r, d))
            })
            .collect()
    }

    fn fits(&self, j: usize, k: usize) -> bool {
        let c = self.cand(j, k);
        let vms = i64::from(c.vms);
        self.frame.offer_res[c.offer].iter().all(|&(r, a)| a * vms <= self.free[r])
    }

    /// Takes (`sign` 1) or gives back (-1) what `vms` VMs of `offer` use.
    fn charge(&mut self, offer: usize, vms: u32, sign: i64) {
        for &(r, a) in &self.frame.offer_res[offer] {
            let old = self.free[r];
            self.free[r] -= sign * a * i64::from(vms);
            self.state ^= no_room::term(r, old) ^ no_room::term(r, self.free[r]);
        }
    }

    /// How much of resource `r` `vms` VMs of `offer` use.
    fn uses(&self, offer: usize, vms: u32, r: usize) -> i64 {
        self.frame.offer_res[offer].iter().find(|&&(x, _)| x == r).map_or(0, |&(_, a)| a * i64::from(vms))
    }

    fn put(&mut self, j: usize, k: usize) {
        let c = *self.cand(j, k);
        self.charge(c.offer, c.vms, 1);
        self.layout ^= no_room::placed(j, k);
        self.slot[j] = k as u32;
        self.at[j] = self.on_offer[c.offer].len() as u32;
        self.on_offer[c.offer].push(j);
    }

    fn remove(&mut self, j: usize) -> usize {
        let k = self.slot[j] as usize;
        let c = *self.cand(j, k);
        self.charge(c.offer, c.vms, -1);
        self.layout ^= no_room::placed(j, k);
        self.slot[j] = NONE;
        let list = &mut self.on_offer[c.offer];
        let i = self.at[j] as usize;
        debug_assert_eq!(list[i], j, "placed on its offer");
        list.swap_remove(i);
        if let Some(&moved) = list.get(i) {
            self.at[moved] = i as u32;
        }
        self.at[j] = NONE;
        k
    }

    /// Places an unplaced gang job on its cheapest candidate with room.
    fn insert(&mut self, j: usize) -> bool {
        let shape = self.inst.shape_of(j);
        if self.no_room.known(self.state, shape, Look::Insert, f64::INFINITY) {
            return false;
        }
        let n = self.inst.cands_of(j).len();
        match (0..n).find(|&k| self.fits(j, k)) {
            Some(k) => {
                self.put(j, k);
                true
            }
            None => {
                self.no_room.remember(self.state, shape, Look::Insert, f64::INFINITY);
                false
            }
        }
    }

    /// The placed gang jobs that hold some of the resources in `needs`, each once, in no particular
    /// order.
    fn holders_unordered(&self, needs: &[(usize, i64)]) -> Vec<usize> {
        self.offers_using(needs).into_iter().flat_map(|o| self.on_offer[o].iter().copied()).collect()
    }

    /// The offers that use some of the resources in `needs`, each once: what is placed on them is
    /// each holder once, as a job or a piece is on one offer (a busy pool's offers hold thousands
    /// of jobs, which sorting and deduplicating per job made most of an ejection's cost on 10,000
    /// jobs).
    fn offers_using(&self, needs: &[(usize, i64)]) -> Vec<usize> {
        let mut offers: Vec<usize> =
            needs.iter().flat_map(|&(r, _)| self.frame.res_offers[r].iter().copied()).collect();
        offers.sort_unstable();
        offers.dedup();
        offers
    }

    /// The holders on offer `o` that job `j` may take out: the gang jobs, and the pieces not taken
    /// out of other jobs than `j` (as holder ids: the number of jobs + the piece's index).
    fn holders_on(&self, o: usize, j: usize) -> impl Iterator<Item = usize> + '_ {
        let n = self.slot.len();
        let pieces =
            self.pieces_on[o].iter().filter(move |&&x| !self.out[x] && self.fixed[x].job != j).map(move |&x| n + x);
        self.on_offer[o].iter().copied().chain(pieces)
    }

    /// The placed gang jobs that each hold all of the resources in `needs`, in job order.
    fn covering_holders(&self, needs: &[(usize, i64)]) -> Vec<usize> {
        let mut out = Vec::new();
        for o in self.covering_offers(needs) {
            out.extend(self.on_offer[o].iter().copied().filter(|&i| needs.iter().all(|&(r, d)| self.held(i, r) >= d)));
        }
        out.sort_unstable();
        out
    }

    /// [`Packing::covering_holders`], only the first of each shape on each offer: moving any other
    /// frees the same room and finds the same places to go (on real queues, a busy offer holds
    /// hundreds of 1-GPU jobs of a few shapes, and trying each was most of a 10,000-job weight
    /// search).
    fn covering_holders_by_shape(&self, needs: &[(usize, i64)]) -> Vec<usize> {
        let inst = self.inst;
        let mut out = Vec::new();
        // Per offer, the first holder of each shape (an offer's holders are few shapes).
        let mut firsts: Vec<(usize, usize)> = Vec::new();
        for o in self.covering_offers(needs) {
            firsts.clear();
            for &i in &self.on_offer[o] {
                let shape = inst.shape_of(i);
                match firsts.iter_mut().find(|(s, _)| *s == shape) {
                    Some((_, first)) => *first = (*first).min(i),
                    None if needs.iter().all(|&(r, d)| self.held(i, r) >= d) => firsts.push((shape, i)),
                    None => {}
                }
            }
            out.extend(firsts.iter().map(|&(_, i)| i));
        }
        out.sort_unstable();
        out
    }

    /// The offers whose VMs use every resource in `needs` (only what is placed on them can free
    /// all of it at once).
    fn covering_offers<'s>(&'s self, needs: &'s [(usize, i64)]) -> impl Iterator<Item = usize> + 's {
        let first = needs.first().map_or(&[][..], |&(r, _)| &self.frame.res_offers[r][..]);
        first
            .iter()
            .copied()
            .filter(move |&o| needs[1..].iter().all(|&(r, _)| self.frame.offer_res[o].iter().any(|&(x, _)| x == r)))
    }

    /// The weight a holder (a gang job, or a piece) places.
    fn holder_weight(&self, i: usize) -> f64 {
        match i.checked_sub(self.slot.len()) {
            None => weight(self.inst, i),
            Some(x) => {
                let a = &self.fixed[x];
                f64::from(a.gpus) * f64::from(self.inst.job(a.job).priority)
            }
        }
    }

    /// The weight an ejection expects to lose with holder `i`: with room-making on, none when the
    /// holder has another candidate of its own that fits now and uses none of the resources in
    /// `needs` ([`Packing::eject_and_place`] then places it there, or counts it lost if the room
    /// went to another); for a piece, the GPUs on the VMs it gives up to free all of `needs` it
    /// can (the rest of it stays, [`Packing::place_piece_again`]); its weight otherwise.
    fn lost_weight(&self, i: usize, needs: &[(usize, i64)]) -> f64 {
        if let Some(x) = i.checked_sub(self.slot.len()).filter(|_| self.part_pieces) {
            let a = &self.fixed[x];
            let given = needs
                .iter()
                .filter_map(|&(r, d)| {
                    let per_vm = self.uses(a.offer, 1, r);
                    (per_vm > 0).then(|| (d + per_vm - 1) / per_vm)
                })
                .max()
                .unwrap_or(0)
                .min(i64::from(a.vms));
            let kept_vms = u32::try_from(i64::from(a.vms) - given).unwrap_or(0);
            let kept = a.gpus.min(kept_vms * self.inst.p.offers[a.offer].gpus_per_vm);
            return f64::from(a.gpus - kept) * f64::from(self.inst.job(a.job).priority);
        }
        if self.room == RoomMaking::ChainsAndEjections && i < self.slot.len() {
            let ki = self.slot[i] as usize;
            let movable = self.frame.tried[i].iter().map(|&k| k as usize).any(|k| {
                k != ki && {
                    let c = self.cand(i, k);
                    self.fits(i, k)
                        && !self.frame.offer_res[c.offer].iter().any(|&(r, _)| needs.iter().any(|&(x, _)| x == r))
                }
            });
            if movable {
                return 0.0;
            }
        }
        self.holder_weight(i)
    }

    /// How much of resource `r` a holder holds.
    fn holder_held(&self, i: usize, r: usize) -> i64 {
        match i.checked_sub(self.slot.len()) {
            None => self.held(i, r),
            Some(x) => self.uses(self.fixed[x].offer, self.fixed[x].vms, r),
        }
    }

    /// Takes a holder out (returns its candidate index; 0 for a piece).
    fn take_out(&mut self, i: usize) -> usize {
        match i.checked_sub(self.slot.len()) {
            None => self.remove(i),
            Some(x) => {
                self.charge(self.fixed[x].offer, self.fixed[x].vms, -1);
                self.layout ^= self.piece_term(x);
                self.out[x] = true;
                0
            }
        }
    }

    /// Puts a holder taken out back.
    fn put_back(&mut self, i: usize, k: usize) {
        match i.checked_sub(self.slot.len()) {
            None => self.put(i, k),
            Some(x) => {
                self.charge(self.fixed[x].offer, self.fixed[x].vms, 1);
                self.layout ^= self.piece_term(x);
                self.out[x] = false;
            }
        }
    }

    /// How much of resource `r` job `i` (placed) holds.
    fn held(&self, i: usize, r: usize) -> i64 {
        let c = self.cand(i, self.slot[i] as usize);
        self.uses(c.offer, c.vms, r)
    }

    /// The jobs to remove so that candidate `k` of `j` fits, of least weight found, and that weight;
    /// `None` when none weighs less than `limit`.
    fn ejection(&self, j: usize, k: usize, limit: f64) -> Option<(Vec<usize>, f64)> {
        let c = self.cand(j, k);
        self.ejection_vms(j, c.offer, c.vms, limit)
    }

    /// The holders to take out so that `vms` VMs of `offer` fit, for job `j` (never its own
    /// pieces), of least weight found, and that weight (as [`Packing::lost_weight`] counts it);
    /// `None` when none weighs less than `limit`.
    fn ejection_vms(&self, j: usize, offer: usize, vms: u32, limit: f64) -> Option<(Vec<usize>, f64)> {
        let needs = self.lacks_vms(offer, vms);
        if needs.is_empty() {
            return Some((Vec::new(), 0.0));
        }
        let holders: Vec<usize> = self.offers_using(&needs).into_iter().flat_map(|o| self.holders_on(o, j)).collect();
        // The lightest single job that frees everything needed (the lowest id among equals): one
        // on an offer that uses all of it.
        let mut single: Option<(usize, f64)> = None;
        for o in self.covering_offers(&needs) {
            for i in self.holders_on(o, j) {
                let w = self.lost_weight(i, &needs);
                if w < limit
                    && single.is_none_or(|(si, sw)| w < sw || (w == sw && i < si))
                    && needs.iter().all(|&(r, d)| self.holder_held(i, r) >= d)
                {
                    single = Some((i, w));
                }
            }
        }
        // Greedy cover: the most missing resource freed per unit of weight first.
        let mut left = needs.clone();
        let mut chosen = Vec::new();
        let mut total = 0.0;
        // The cover takes from the lightest holders only (it prefers little weight per room freed, and
        // a busy pool has thousands of holders). Each holder's weight once: with room-making on,
        // weighing one checks where else it fits.
        let mut pool: Vec<(f64, usize)> = holders.iter().map(|&i| (self.lost_weight(i, &needs), i)).collect();
        if pool.len() > MAX_HOLDERS {
            pool.select_nth_unstable_by(MAX_HOLDERS, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            pool.truncate(MAX_HOLDERS);
        }
        pool.sort_unstable_by_key(|&(_, i)| i);
        while left.iter().any(|&(_, d)| d > 0) {
            let mut best: Option<(usize, f64)> = None;
            for (idx, &(w, i)) in pool.iter().enumerate() {
                let cover: f64 = left
                    .iter()
                    .zip(&needs)
                    .map(
                        |(&(r, d), &(_, d0))| {
                            if d > 0 { self.holder_held(i, r).min(d) as f64 / d0 as f64 } else { 0.0 }
                        },
                    )
                    .sum();
                if cover <= 0.0 {
                    continue;
                }
                let ratio = w / cover;
                if best.is_none_or(|(_, b)| ratio < b) {
                    best = Some((idx, ratio));
                }
            }
            let Some((idx, _)) = best else { break };
            let (w, i) = pool.swap_remove(idx);
            for (r, d) in left.iter_mut() {
                *d -= self.holder_held(i, *r);
            }
            total += w;
            chosen.push(i);
            if total >= limit {
                break;
            }
        }
        let greedy = (left.iter().all(|&(_, d)| d <= 0) && total < limit).then_some((chosen, total));
        match (single, greedy) {
            (Some((i, w)), Some((_, gw))) if w <= gw => Some((vec![i], w)),
            (Some((i, w)), None) => Some((vec![i], w)),
            (_, g) => g,
        }
    }

    /// Tries to place unplaced job `j` by ejecting lighter jobs; keeps the change only if the
    /// weight placed grows. Returns the gain.
    fn eject_for(&mut self, j: usize) -> f64 {
        let inst = self.inst;
        let wj = weight(inst, j);
        let frame = Rc::clone(&self.frame);
        self.eject_among(j, wj, &frame.tried[j])
    }

    fn eject_among(&mut self, j: usize, wj: f64, tried: &[u32]) -> f64 {
        let (layout, shape) = (self.layout, self.inst.shape_of(j));
        let eject = Look::Eject(self.room == RoomMaking::ChainsAndEjections);
        if !self.no_room.known(layout, shape, eject, wj) {
            let mut options: Vec<(f64, usize, Vec<usize>)> = Vec::new();
            for k in tried.iter().map(|&k| k as usize) {
                if let Some((victims, w)) = self.ejection(j, k, wj - 0.5) {
                    options.push((w, k, victims));
                }
            }
            options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (_, k, victims) in options.into_iter().take(3) {
                if let Some(gain) = self.eject_and_place(&victims, Target::Gang(j, k), wj) {
                    return gain;
                }
            }
            self.no_room.remember(layout, shape, eject, wj);
        }
        // Relocate: one placed job, of any weight, that holds all the room a candidate lacks moves
        // to another candidate of its own.
        if !self.no_room.known(layout, shape, Look::Relocate, f64::INFINITY) {
            for k in tried.iter().map(|&k| k as usize) {
                let c = *self.cand(j, k);
                let needs = self.lacks(&c);
                for i in self.covering_holders_by_shape(&needs) {
                    let ki = self.remove(i);
                    if self.fits(j, k) {
                        self.put(j, k);
                        if self.insert(i) {
                            return wj;
                        }
                        self.remove(j);
                    }
                    self.put(i, ki);
                }
            }
            self.no_room.remember(layout, shape, Look::Relocate, f64::INFINITY);
        }
        if self.room == RoomMaking::Off {
            return 0.0;
        }
        // Relocate after ejecting: the job that holds the room moves where lighter ones make way.
        if self.room == RoomMaking::ChainsAndEjections
            && let Some(gain) = self.relocate_ejecting(j, wj, tried)
        {
            return gain;
        }
        // Make room: jobs that hold it move elsewhere, making room there in turn if need be.
        let mut budget = ROOM_BUDGET;
        for k in tried.iter().take(ROOM_CANDIDATES).map(|&k| k as usize) {
            let c = *self.cand(j, k);
            let mut moved = Vec::new();
            if self.make_room(c.offer, c.vms, 1, &mut moved, &mut budget).is_some() {
                self.put(j, k);
                return wj;
            }
        }
        0.0
    }

    /// Places waiting job `j` (worth `wj`) on one of its first [`ROOM_CANDIDATES`] candidates by
    /// moving the one placed job, of any weight, that holds all the room it lacks to another
    /// candidate of its own, after taking out there jobs lighter together than `j` (placed again
    /// elsewhere where they fit). Keeps the change only if more weight is placed; returns the gain.
    fn relocate_ejecting(&mut self, j: usize, wj: f64, tried: &[u32]) -> Option<f64> {
        for k in tried.iter().take(ROOM_CANDIDATES).map(|&k| k as usize) {
            let needs = self.lacks(self.cand(j, k));
            for i in self.covering_holders(&needs) {
                let ki = self.remove(i);
                if self.fits(j, k) {
                    self.put(j, k);
                    let frame = Rc::clone(&self.frame);
                    for k2 in frame.tried[i].iter().map(|&k| k as usize).filter(|&k2| k2 != ki) {
                        let Some((victims, _)) = self.ejection(i, k2, wj - 0.5) else { continue };
                        if !victims.contains(&j)
                            && let Some(gain) = self.eject_and_place(&victims, Target::Gang(i, k2), wj)
                        {
                            return Some(gain);
                        }
                    }
                    self.remove(j);
                }
                self.put(i, ki);
            }
        }
        None
    }

    /// How far `vms` VMs of `offer` are from fitting: per resource they lack, the share of what
    /// they use that is missing, summed (0 when they fit).
    fn lack(&self, offer: usize, vms: u32) -> f64 {
        let vms = i64::from(vms);
        self.frame.offer_res[offer]
            .iter()
            .map(|&(r, a)| ((a * vms - self.free[r]).max(0) as f64) / (a * vms).max(1) as f64)
            .sum()
    }

    /// Moves placed gang jobs to other candidates of their own, taking none out, until `vms` VMs
    /// of `offer` fit; a job that moves may first make room where it goes the same way, `depth`
    /// levels deep. Each move must bring the VMs closer to fitting. Returns the moves made (job,
    /// candidate it left), oldest first; `None`, with nothing moved, when room is not made within
    /// `budget` tries. `moved`: jobs this chain moved already (not moved again).
    fn make_room(
        &mut self,
        offer: usize,
        vms: u32,
        depth: u32,
        moved: &mut Vec<usize>,
        budget: &mut usize,
    ) -> Option<Vec<(usize, usize)>> {
        let mut log = Vec::new();
        loop {
            let needs = self.lacks_vms(offer, vms);
            if needs.is_empty() {
                return Some(log);
            }
            let lack = self.lack(offer, vms);
            let mut holders: Vec<(f64, usize)> = self
                .offers_using(&needs)
                .into_iter()
                .flat_map(|o| self.holders_on(o, usize::MAX))
                .filter(|i| !moved.contains(i))
                .map(|i| {
                    let share: f64 = needs.iter().map(|&(r, d)| self.holder_held(i, r).min(d) as f64 / d as f64).sum();
                    (share, i)
                })
                .collect();
            holders.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            holders.truncate(if depth > 0 { ROOM_HOLDERS } else { ROOM_HOLDERS / 2 });
            let mut progressed = false;
            'holders: for (_, i) in holders {
                if i >= self.slot.len() {
                    if *budget > 0 && self.move_piece(i - self.slot.len(), &needs, offer, vms, lack, &mut log) {
                        progressed = true;
                        break 'holders;
                    }
                    *budget = budget.saturating_sub(1);
                    continue;
                }
                let ki = self.remove(i);
                moved.push(i);
                let frame = Rc::clone(&self.frame);
                for &k in &frame.tried[i] {
                    let k = k as usize;
                    if k == ki || *budget == 0 {
                        continue;
                    }
                    *budget -= 1;
                    let c = *self.cand(i, k);
                    let sub = if self.fits(i, k) {
                        Some(Vec::new())
                    } else if depth > 0 {
                        self.make_room(c.offer, c.vms, depth - 1, moved, budget)
                    } else {
                        None
                    };
                    let Some(sub) = sub else { continue };
                    if self.fits(i, k) {
                        self.put(i, k);
                        if self.lack(offer, vms) < lack - 1e-9 {
                            log.extend(sub);
                            log.push((i, ki));
                            progressed = true;
                            break 'holders;
                        }
                        self.remove(i);
                    }
                    self.undo(sub);
                }
                moved.pop();
                self.put(i, ki);
            }
            if !progressed {
                self.undo(log);
                return None;
            }
        }
    }

    /// Moves piece `x` (for [`Packing::make_room`], making room for `vms` VMs of `offer` that
    /// lack `needs`, `lack` far from fitting): all its GPUs placed again on offers that use none of
    /// `needs`, as new pieces. Logs the move (the piece's holder id, the new pieces' count) and
    /// returns `true` if it brings the VMs closer to fitting; else undoes it.
    fn move_piece(
        &mut self,
        x: usize,
        needs: &[(usize, i64)],
        offer: usize,
        vms: u32,
        lack: f64,
        log: &mut Vec<(usize, usize)>,
    ) -> bool {
        let i = self.slot.len() + x;
        let before = self.fixed.len();
        self.take_out(i);
        if self.place_piece_again(x, needs) == self.fixed[x].gpus && self.lack(offer, vms) < lack - 1e-9 {
            log.push((i, self.fixed.len() - before));
            return true;
        }
        while self.fixed.len() > before {
            self.drop_last_piece();
        }
        self.put_back(i, 0);
        false
    }

    /// Takes back the moves of [`Packing::make_room`], newest first (a gang job's, logged as the
    /// job and the candidate it left; a piece's, as its holder id and the pieces it became).
    fn undo(&mut self, log: Vec<(usize, usize)>) {
        for (i, k) in log.into_iter().rev() {
            if i >= self.slot.len() {
                for _ in 0..k {
                    self.drop_last_piece();
                }
                self.put_back(i, 0);
            } else {
                self.remove(i);
                self.put(i, k);
            }
        }
    }

    /// Places split job `j`, placed in part under a price cap or budget, again from scratch on the
    /// candidates cheapest per GPU first, where there is room now: pieces placed where room was
    /// first found can spend the cap on few GPUs (four V100s on one VM for what 27 T4 VMs cost).
    /// Keeps the change only if more weight is placed. Returns the gain.
    fn respread_split(&mut self, j: usize) -> f64 {
        let inst = self.inst;
        let job = inst.job(j);
        if !self.part_pieces || (job.max_price_per_hour.is_none() && job.budget.is_none()) {
            return 0.0;
        }
        let n = self.slot.len();
        let old: Vec<usize> = self.pieces_of[j].iter().copied().filter(|&x| !self.out[x]).collect();
        let before: u32 = old.iter().map(|&x| self.fixed[x].gpus).sum();
        if old.is_empty() || before == job.gpus {
            return 0.0;
        }
        let saved = self.clone();
        for &x in &old {
            self.take_out(n + x);
        }
        let prio = f64::from(job.priority);
        let mut gain = f64::from(self.place_split(j, job.gpus, OfferFilter::CheapestPerGpu, &[])) * prio
            - f64::from(before) * prio;
        // Then the room lighter holders give up, as for any split job short of GPUs.
        for _ in 0..RESPREAD_EJECTIONS {
            let g = self.eject_for_split(j);
            if g <= 0.0 {
                break;
            }
            gain += g;
        }
        if gain > 0.5 {
            return gain;
        }
        *self = saved;
        0.0
    }

    /// Tries to place more of split job `j` (what it still needs, on one candidate) by taking out
    /// lighter holders; keeps the change only if more weight is placed. Returns the gain.
    fn eject_for_split(&mut self, j: usize) -> f64 {
        let inst = self.inst;
        let job = inst.job(j);
        let (mut placed, mut price, mut spent) = (0, 0.0, 0.0);
        for &x in self.pieces_of[j].iter().filter(|&&x| !self.out[x]) {
            let a = &self.fixed[x];
            placed += a.gpus;
            price += f64::from(a.vms) * inst.p.offers[a.offer].price_per_hour;
            spent += a.cost;
        }
        let rem = job.gpus - placed;
        if rem == 0 {
            return 0.0;
        }
        let prio = f64::from(job.priority);
        let frame = Rc::clone(&self.frame);
        let mut gain = 0.0;
        'candidates: for &k in &frame.tried[j] {
            let c = *self.cand(j, k as usize);
            // All it still needs, else half of it, else a quarter: lighter holders may free room
            // for part of a large job, and its price cap or budget may allow only part.
            let full = rem.div_ceil(c.gpus);
            let budgeted = c.vms_allowed(inst, j, full, rem, price, spent);
            let sizes = if self.part_pieces {
                [budgeted, budgeted / 2, budgeted / 4, budgeted / 8, 1.min(budgeted)]
            } else {
                // Whole or not at all: the cap or budget allows all it needs, or this one is out.
                [if budgeted == full { full } else { 0 }, 0, 0, 0, 0]
            };
            for (n, &vms) in sizes.iter().enumerate() {
                if vms == 0 || sizes[..n].contains(&vms) {
                    continue;
                }
                let gpus = rem.min(vms * c.gpus);
                let cost = f64::from(vms) * c.cost + c.egress_per_gpu * f64::from(gpus);
                let wj = prio * f64::from(gpus);
                let Some((victims, _)) = self.ejection_vms(j, c.offer, vms, wj - 0.5) else { continue };
                let piece = Assign { job: j, offer: c.offer, vms, gpus, cost };
                if let Some(g) = self.eject_and_place(&victims, Target::Piece(piece), wj) {
                    gain = g;
                    break 'candidates;
                }
            }
        }
        gain
    }

    /// Takes `victims` out and places `target` (worth `wj`) in their room, then places the gang
    /// victims again where they fit (a piece's GPUs on other offers of its job, as new pieces:
    /// counted lost only where there is no room); keeps the change and returns the weight gained if
    /// it is positive, else undoes it all.
    fn eject_and_place(&mut self, victims: &[usize], target: Target, wj: f64) -> Option<f64> {
        let old: Vec<(usize, usize)> = victims.iter().map(|&i| (i, self.take_out(i))).collect();
        let (offer, vms) = match target {
            Target::Gang(j, k) => (self.cand(j, k).offer, self.cand(j, k).vms),
            Target::Piece(a) => (a.offer, a.vms),
        };
        if self.lacks_vms(offer, vms).is_empty() {
            let pieces = self.fixed.len();
            match target {
                Target::Gang(j, k) => self.put(j, k),
                Target::Piece(a) => self.add_piece(a),
            }
            let n = self.slot.len();
            let mut lost = 0.0;
            let mut moved = Vec::new();
            for &(i, _) in &old {
                if i < n {
                    if self.insert(i) {
                        moved.push(i);
                    } else {
                        lost += self.holder_weight(i);
                    }
                } else {
                    let x = i - n;
                    let again = self.place_piece_again(x, &[]);
                    let prio = f64::from(self.inst.job(self.fixed[x].job).priority);
                    lost += prio * f64::from(self.fixed[x].gpus - again);
                }
            }
            if wj - lost > 0.5 {
                return Some(wj - lost);
            }
            for i in moved {
                self.remove(i);
            }
            while self.fixed.len() > pieces + usize::from(matches!(target, Target::Piece(_))) {
                self.drop_last_piece();
            }
            match target {
                Target::Gang(j, _) => {
                    self.remove(j);
                }
                Target::Piece(_) => self.drop_last_piece(),
            }
        }
        for &(i, ki) in &old {
            self.put_back(i, ki);
        }
        None
    }

    /// Places the GPUs of piece `x` (taken out) again where there is room now, as new pieces: first
    /// (where pieces are taken in part) on its own offer, as much as the room left there holds (an ejection that needed only part of
    /// the piece's room trims it, where taking the whole piece out would lose a large job's weight
    /// for a small one's), then on the other offers of the candidates ejection tries for its job;
    /// none of them on an offer that uses a resource in `avoid`, all within the job's price cap and
    /// budget. Returns the GPUs placed.
    fn place_piece_again(&mut self, x: usize, avoid: &[(usize, i64)]) -> u32 {
        let a = self.fixed[x];
        let here =
            if self.part_pieces { self.place_split(a.job, a.gpus, OfferFilter::Only(a.offer), avoid) } else { 0 };
        here + self.place_split(a.job, a.gpus - here, OfferFilter::Except(a.offer), avoid)
    }

    /// Places up to `gpus` more GPUs of split job `j` where there is room now, as new pieces, on
    /// the candidates ejection tries for it that `offers` admits (none on offers using a resource
    /// in `avoid`), within its price cap and budget. Returns the GPUs placed.
    fn place_split(&mut self, j: usize, gpus: u32, offers: OfferFilter, avoid: &[(usize, i64)]) -> u32 {
        let inst = self.inst;
        let job = inst.job(j);
        let (mut price, mut spent) = (0.0, 0.0);
        for &y in self.pieces_of[j].iter().filter(|&&y| !self.out[y]) {
            price += f64::from(self.fixed[y].vms) * inst.p.offers[self.fixed[y].offer].price_per_hour;
            spent += self.fixed[y].cost;
        }
        // Its own offer may be outside the candidates ejection tries (the cheapest few at the
        // multipliers' prices): a piece trimmed there is looked for among all of the job's.
        let ks: Vec<usize> = match offers {
            OfferFilter::Only(o) => (0..inst.cands_of(j).len()).filter(|&k| self.cand(j, k).offer == o).collect(),
            OfferFilter::Except(o) => {
                self.frame.tried[j].iter().map(|&k| k as usize).filter(|&k| self.cand(j, k).offer != o).collect()
            }
            OfferFilter::CheapestPerGpu => {
                let per_gpu = |k: usize| {
                    let c = self.cand(j, k);
                    inst.p.offers[c.offer].price_per_hour / f64::from(c.gpus)
                };
                let mut ks: Vec<usize> = (0..inst.cands_of(j).len()).collect();
                ks.sort_by(|&a, &b| per_gpu(a).total_cmp(&per_gpu(b)).then(a.cmp(&b)));
                ks
            }
        };
        let mut left = gpus;
        for k in ks {
            if left == 0 {
                break;
            }
            let c = *self.cand(j, k);
            if self.frame.offer_res[c.offer].iter().any(|&(r, _)| avoid.iter().any(|&(x, _)| x == r)) {
                continue;
            }
            // An offer drawing on nothing listed has no limit.
            let room =
                self.frame.offer_res[c.offer].iter().map(|&(r, u)| self.free[r].max(0) / u).min().unwrap_or(i64::MAX);
            let mut vms = left.div_ceil(c.gpus).min(u32::try_from(room).unwrap_or(u32::MAX));
            let hourly = inst.p.offers[c.offer].price_per_hour;
            let cost_of = |v: u32| f64::from(v) * c.cost + c.egress_per_gpu * f64::from(left.min(v * c.gpus));
            while vms > 0
                && (job.max_price_per_hour.is_some_and(|cap| price + f64::from(vms) * hourly > cap + EPS)
                    || job.budget.is_some_and(|b| spent + cost_of(vms) > b + EPS))
            {
                vms -= 1;
            }
            if vms == 0 {
                continue;
            }
            let placed = left.min(vms * c.gpus);
            let cost = cost_of(vms);
            self.add_piece(Assign { job: j, offer: c.offer, vms, gpus: placed, cost });
            price += f64::from(vms) * hourly;
            spent += cost;
            left -= placed;
            if left == 0 {
                break;
            }
        }
        gpus - left
    }

    /// Places a new piece (it must fit).
    fn add_piece(&mut self, a: Assign) {
        self.pieces_on[a.offer].push(self.fixed.len());
        self.pieces_of[a.job].push(self.fixed.len());
        self.fixed.push(a);
        self.out.push(false);
        self.charge(a.offer, a.vms, 1);
        self.layout ^= self.piece_term(self.fixed.len() - 1);
    }

    /// Removes the piece [`Packing::add_piece`] placed last.
    fn drop_last_piece(&mut self) {
        let x = self.fixed.len() - 1;
        if !self.out[x] {
            self.layout ^= self.piece_term(x);
        }
        let a = self.fixed.pop().expect("a piece");
        self.out.pop();
        self.pieces_on[a.offer].pop();
        self.pieces_of[a.job].pop();
        self.charge(a.offer, a.vms, -1);
    }

    /// Piece `x`'s term in the layout fingerprint.
    fn piece_term(&self, x: usize) -> u64 {
        let a = &self.fixed[x];
        no_room::piece(x, a.job, a.offer, a.vms)
    }

    /// Removes placed job `i` and fills the room with unplaced jobs; keeps the change only if more
    /// weight is placed. Returns the gain.
    fn drop_for_many(&mut self, i: usize, unplaced: &[usize]) -> f64 {
        let inst = self.inst;
        let wi = weight(inst, i);
        let ki = self.remove(i);
        let mut added = Vec::new();
        let mut gain = -wi;
        // Placing only takes room, so a shape that found none finds none for the jobs after it.
        let mut full: Vec<usize> = Vec::new();
        for &j in unplaced {
            if self.slot[j] != NONE || full.contains(&inst.shape_of(j)) {
                continue;
            }
            if self.insert(j) {
                gain += weight(inst, j);
                added.push(j);
            } else {
                full.push(inst.shape_of(j));
            }
        }
        if gain > 0.5 {
            return gain;
        }
        for j in added {
            self.remove(j);
        }
        self.put(i, ki);
        0.0
    }

    /// Local search for weight until no move helps, or `deadline`.
    pub fn improve_weight(&mut self, deadline: Option<Instant>) {
        self.improve_weight_in(deadline, None);
    }

    /// [`Packing::improve_weight`] over the jobs `only` marks (all when `None`; split jobs are then
    /// left as they are).
    fn improve_weight_in(&mut self, deadline: Option<Instant>, only: Option<&[bool]>) {
        let within = |j: usize| only.is_none_or(|m| m[j]);
        let mut steps = 0;
        let out_of_time = |steps: &mut usize| {
            *steps += 1;
            (*steps).is_multiple_of(CLOCK_EVERY) && deadline.is_some_and(|d| Instant::now() >= d)
        };
        for _pass in 0..MAX_PASSES {
            let mut improved = false;
            let frame = Rc::clone(&self.frame);
            for &j in &frame.order {
                if self.slot[j] != NONE || !within(j) {
                    continue;
                }
                if out_of_time(&mut steps) {
                    return;
                }
                if self.insert(j) || (self.frame.promising[j] && self.eject_for(j) > 0.0) {
                    improved = true;
                }
            }
            for s in 0..if only.is_some() { 0 } else { self.frame.splits.len() } {
                let j = self.frame.splits[s];
                if out_of_time(&mut steps) {
                    return;
                }
                if self.respread_split(j) > 0.0 || (self.frame.promising[j] && self.eject_for_split(j) > 0.0) {
                    improved = true;
                }
            }
            // Drop one, add many: lightest placed jobs first (they are the likeliest to be outweighed).
            let mut placed: Vec<usize> =
                frame.order.iter().copied().filter(|&j| self.slot[j] != NONE && within(j)).collect();
            placed.reverse();
            for i in placed {
                if out_of_time(&mut steps) {
                    return;
                }
                let near = self.neighbours(i);
                if !near.is_empty() && self.drop_for_many(i, &near) > 0.0 {
                    improved = true;
                }
            }
            if !improved {
                return;
            }
        }
    }

    /// [`Packing::kick`] with a weight search that also makes room for the jobs it places as
    /// `how` says.
    pub fn kick_making_room(&mut self, kicks: usize, how: RoomMaking, deadline: Option<Instant>) {
        self.room = how;
        self.kick(kicks, deadline);
        self.room = RoomMaking::Off;
    }

    /// Weight placed: the gang jobs and the pieces not taken out.
    pub fn placed_weight(&self) -> f64 {
        let n = self.slot.len();
        let gangs: f64 = (0..n).filter(|&j| self.slot[j] != NONE).map(|j| weight(self.inst, j)).sum();
        gangs + (0..self.fixed.len()).filter(|&x| !self.out[x]).map(|x| self.holder_weight(n + x)).sum::<f64>()
    }

    /// Iterated local search: `kicks` times, perturbs the current packing and searches again (a fixed
    /// seed: solving twice gives the same plan). Kicks alternate between removing a few pseudo-
    /// randomly chosen placed gang jobs and forcing an unplaced job onto one of its candidates
    /// whatever it displaces ([`Packing::force`]: an ejection chain the weight search would not
    /// start, as it only ejects lighter jobs). A result of at least the current weight becomes the
    /// current packing (moves across plateaus of equal weight: +0.5-1 % weight on 100-120 diverse
    /// jobs over keeping only gains), and the best is kept. Leaves the local optimum the weight
    /// search alone gets stuck in, where a different set of jobs shares the binding pools.
    pub fn kick(&mut self, kicks: usize, deadline: Option<Instant>) {
        self.kick_local(kicks, None, 0, deadline);
    }

    /// The jobs a kick's search looks at when it is local: those the kick moved, the jobs placed on
    /// the offers they left or took, and per resource those offers use, up to `per` waiting gang
    /// jobs with a candidate using it (the first in search order).
    fn near_changes(&self, trial: &Packing, per: usize) -> Vec<bool> {
        let mut mask = vec![false; self.slot.len()];
        let mut offers = Vec::new();
        for (j, moved) in mask.iter_mut().enumerate() {
            if self.slot[j] != trial.slot[j] {
                *moved = true;
                for (p, k) in [(self, self.slot[j]), (trial, trial.slot[j])] {
                    if k != NONE {
                        offers.push(p.cand(j, k as usize).offer);
                    }
                }
            }
        }
        for o in offers {
            for &j in &trial.on_offer[o] {
                mask[j] = true;
            }
            for &(r, _) in &self.frame.offer_res[o] {
                for &j in self.frame.res_jobs[r].iter().filter(|&&j| trial.slot[j] == NONE).take(per) {
                    mask[j] = true;
                }
            }
        }
        mask
    }

    /// [`Packing::kick`], each kick's weight search over only the jobs near what it moved when
    /// `local` > 0 (see [`Packing::near_changes`]; split jobs stay as they are): on 1,000-10,000
    /// jobs a whole search per kick costs 10-150 ms, a local one 1-4 ms. `more`: after the
    /// `kicks`, rounds of `more.0` more while the best placed weight is below `more.1`, a round
    /// only after one that placed more, at most `more.2` rounds.
    pub fn kick_local(
        &mut self,
        kicks: usize,
        more: Option<(usize, f64, usize)>,
        local: usize,
        deadline: Option<Instant>,
    ) {
        let (extra, enough, rounds) = more.unwrap_or((0, 0.0, 0));
        let mut best_weight = self.placed_weight();
        let mut round_from = best_weight;
        let mut cur = self.clone();
        let mut cur_weight = best_weight;
        // Local kicks draw other jobs than the whole-search kicks that come before them.
        let mut next = xorshift(if local > 0 { 0x2F7A_3C91_55D4_E8B1 } else { 0x9E37_79B9_7F4A_7C15 });
        for n in 0..kicks + extra * rounds {
            if deadline.is_some_and(|d| Instant::now() >= d) || (n >= kicks && best_weight >= enough) {
                return;
            }
            // Another round of the extra kicks only where the last one found weight: where it did
            // not, the search is stuck and more kicks rarely help (tiny-1000-4: 120 more kicks,
            // 132 ms, nothing placed).
            if n >= kicks && (n - kicks).is_multiple_of(extra) {
                if n > kicks && best_weight <= round_from + 0.5 {
                    return;
                }
                round_from = best_weight;
            }
            let mut placed: Vec<usize> = cur.frame.order.iter().copied().filter(|&j| cur.slot[j] != NONE).collect();
            // Where pieces are taken in part, a kick takes split jobs' pieces out too (holder ids
            // after the jobs'): a queue of split jobs alone has nothing else to kick. Up to
            // [`PIECE_KICKS_UP_TO`] jobs.
            if cur.part_pieces && local == 0 && cur.slot.len() <= PIECE_KICKS_UP_TO {
                let n = cur.slot.len();
                placed.extend((0..cur.fixed.len()).filter(|&x| !cur.out[x]).map(|x| n + x));
            }
            if placed.is_empty() {
                return;
            }
            let mut trial = cur.clone();
            let unplaced: Vec<usize> = cur.waiting_in_order().collect();
            if n % 2 == 1 && !unplaced.is_empty() {
                let u = unplaced[(next() % unplaced.len() as u64) as usize];
                let tried = &cur.frame.tried[u];
                let k = tried[(next() % tried.len() as u64) as usize] as usize;
                trial.force(u, k);
            } else {
                for _ in 0..(placed.len() / 20).clamp(2, 8) {
                    let i = placed[(next() % placed.len() as u64) as usize];
                    match i.checked_sub(trial.slot.len()) {
                        None if trial.slot[i] != NONE => {
                            trial.remove(i);
                        }
                        Some(x) if !trial.out[x] => {
                            trial.take_out(i);
                        }
                        _ => {}
                    }
                }
            }
            if local > 0 {
                let mask = cur.near_changes(&trial, local);
                trial.improve_weight_in(deadline, Some(&mask));
            } else {
                trial.improve_weight(deadline);
            }
            let w = trial.placed_weight();
            if w > best_weight + 0.5 {
                best_weight = w;
                *self = trial.clone();
            }
            if w >= cur_weight - 0.5 {
                cur_weight = w;
                cur = trial;
            }
        }
    }

    /// The waiting jobs that have candidates to be forced onto, in the search's order.
    fn waiting_in_order(&self) -> impl Iterator<Item = usize> + '_ {
        self.frame.order.iter().copied().filter(|&j| self.slot[j] == NONE && !self.frame.tried[j].is_empty())
    }

    /// The first `jobs` waiting jobs in the guided order (the most worth placing at the prices
    /// [`Packing::guide`] took) forced onto their first candidate one after the other, each trial's
    /// weight search over the jobs near what the forcing moved (`local`, see [`Packing::near_changes`]);
    /// a trial heavier than the plan replaces it. The kicks force a waiting job drawn at random,
    /// among hundreds on a large problem: the heavy gang jobs an optimum places are rarely drawn.
    pub fn force_waiting(&mut self, jobs: usize, local: usize, deadline: Option<Instant>) {
        let waiting: Vec<usize> = self.waiting_in_order().take(jobs).collect();
        for u in waiting {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            if self.slot[u] != NONE {
                continue;
            }
            let mut trial = self.clone();
            trial.force(u, self.frame.tried[u][0] as usize);
            let mask = self.near_changes(&trial, local);
            trial.improve_weight_in(deadline, Some(&mask));
            if trial.placed_weight() > self.placed_weight() + 0.5 {
                *self = trial;
            }
        }
    }

    /// Places unplaced job `j` on candidate `k` whatever it costs: the lightest placed jobs holding
    /// the room it lacks are removed until it fits (they wait for the search to place them again).
    fn force(&mut self, j: usize, k: usize) {
        if self.inst.cands_of(j).is_empty() {
            return;
        }
        let c = *self.cand(j, k);
        let mut holders = self.holders_unordered(&self.lacks(&c));
        holders.sort_by(|&a, &b| weight(self.inst, a).total_cmp(&weight(self.inst, b)).then(a.cmp(&b)));
        for i in holders {
            if self.fits(j, k) {
                break;
            }
            let needs = self.lacks(&c);
            if needs.iter().any(|&(r, _)| self.held(i, r) > 0) {
                self.remove(i);
            }
        }
        if self.fits(j, k) {
            self.put(j, k);
        }
    }

    /// The unplaced jobs lighter than placed job `i` that have a candidate using one of the
    /// resources `i` holds, most weight first.
    fn neighbours(&self, i: usize) -> Vec<usize> {
        let inst = self.inst;
        let wi = weight(inst, i);
        let o = self.cand(i, self.slot[i] as usize).offer;
        let mut out: Vec<usize> = Vec::new();
        // `res_jobs` is in search order: the first few per resource are the ones the fill places first
        // (a pool of a busy region lists thousands of jobs; scanning all of them for every placed job
        // was most of the weight search on 10,000 jobs).
        for &(r, _) in &self.frame.offer_res[o] {
            out.extend(
                self.frame.res_jobs[r]
                    .iter()
                    .copied()
                    .filter(|&j| self.slot[j] == NONE && weight(inst, j) < wi)
                    .take(MAX_NEIGHBOURS),
            );
        }
        out.sort_unstable_by_key(|&j| self.frame.rank[j]);
        out.dedup();
        out
    }

    /// Local search for cost at the same weight: every placed job to its cheapest candidate with
    /// room, else after moving the job that holds that room elsewhere; until no move helps, or
    /// `deadline`.
    pub fn improve_cost(&mut self, deadline: Option<Instant>) {
        let mut steps: usize = 0;
        for _round in 0..20 {
            let mut improved = false;
            let mut placed: Vec<usize> = (0..self.slot.len()).filter(|&j| self.slot[j] != NONE).collect();
            placed.sort_by(|&a, &b| self.cost_of(b).total_cmp(&self.cost_of(a)).then(a.cmp(&b)));
            for j in placed {
                steps += 1;
                if steps.is_multiple_of(CLOCK_EVERY) && deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
                let old_k = self.slot[j] as usize;
                let old_cost = self.cand(j, old_k).cost;
                self.remove(j);
                self.insert(j);
                let k = self.slot[j] as usize;
                if k != old_k {
                    improved = true;
                    continue;
                }
                // Cheaper candidates (ranked before the current one) that lack room: move a holder.
                for k in 0..old_k {
                    let c = *self.cand(j, k);
                    if c.cost >= old_cost - EPS * old_cost.max(1.0) {
                        break;
                    }
                    if self.swap_in(j, k, old_cost) {
                        improved = true;
                        break;
                    }
                }
            }
            if !improved {
                return;
            }
        }
    }

    /// Iterated search for cost at the same weight: `kicks` times, moves a pseudo-randomly chosen
    /// placed gang job to a cheaper candidate of its own whatever room that takes (the lightest
    /// holders are removed), places the removed jobs again with the weight search, then searches
    /// for cost, the offers re-filled once ([`Packing::improve_cost_refilled`]); keeps the result
    /// when it places at least as much weight for less. A chain of moves (a large gang to a
    /// cheaper region, the jobs there elsewhere) that no single relocation or swap pays for alone.
    pub fn kick_cost(&mut self, kicks: usize, deadline: Option<Instant>) {
        let mut best = (self.placed_weight(), self.placed_cost());
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        for _ in 0..kicks {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let mut placed: Vec<usize> = self.frame.order.iter().copied().filter(|&j| self.slot[j] != NONE).collect();
            if placed.is_empty() {
                return;
            }
            // The dearest jobs first, and most often: they are where moving saves most.
            placed.sort_by(|&a, &b| self.cost_of(b).total_cmp(&self.cost_of(a)).then(a.cmp(&b)));
            let r = (next() % 1_000_000) as f64 / 1e6;
            let i = placed[((r * r) * placed.len() as f64) as usize];
            // Candidates are ranked cheapest first: those before the current one are cheaper.
            let current = self.slot[i] as usize;
            if current == 0 {
                continue;
            }
            let k = (next() % current as u64) as usize;
            let mut trial = self.clone();
            trial.remove(i);
            trial.force(i, k);
            // The weight search places the removed jobs again, heaviest first, ejecting lighter ones
            // where it must (placing each on its cheapest candidate with room first, in any order,
            // left 60-job plans 4 % dearer); a plan of less weight is not kept.
            if trial.slot[i] == NONE {
                continue;
            }
            trial.improve_weight(deadline);
            trial.improve_cost_refilled(1, deadline);
            let found = (trial.placed_weight(), trial.placed_cost());
            if found.0 > best.0 + 0.5 || (found.0 > best.0 - 0.5 && found.1 < best.1 - EPS * best.1.max(1.0)) {
                best = found;
                *self = trial;
            }
        }
    }

    /// Moves each placed gang job that costs more than `share` of the plan's cost above its cheapest
    /// candidate to a cheaper one after making room there by a chain of moves that together cost
    /// less than the move saves ([`Packing::make_room_within`]); dearest first, while some move
    /// helps. A job on an eight-GPU VM for want of room on a one-GPU one pays for seven idle GPUs,
    /// and freeing that room can take two or three moves, which no swap of two jobs pays for alone.
    pub fn improve_cost_making_room(&mut self, share: f64, deadline: Option<Instant>) {
        for _round in 0..MAX_PASSES {
            let excess = share * self.placed_cost();
            let mut dear: Vec<(f64, usize)> = (0..self.slot.len())
                .filter(|&j| self.slot[j] != NONE)
                .map(|j| (self.cost_of(j) - self.cand(j, 0).cost, j))
                .filter(|&(e, _)| e > excess)
                .collect();
            dear.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            dear.truncate(DEAR_JOBS);
            let mut improved = false;
            for (_, j) in dear {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
                let old_cost = self.cost_of(j);
                let old_k = self.remove(j);
                let mut budget = ROOM_BUDGET;
                for k in 0..old_k {
                    let c = *self.cand(j, k);
                    let saving = old_cost - c.cost - EPS * old_cost.max(1.0);
                    if saving <= 0.0 || budget == 0 {
                        break;
                    }
                    let mut moved = vec![j];
                    if self.make_room_within(c.offer, c.vms, 1, saving, &mut moved, &mut budget).is_some() {
                        self.put(j, k);
                        improved = true;
                        break;
                    }
                }
                if self.slot[j] == NONE {
                    self.put(j, old_k);
                }
            }
            if !improved {
                return;
            }
        }
    }

    /// [`Packing::make_room`] for the cost search: placed gang jobs moved to other candidates of
    /// their own until `vms` VMs of `offer` fit, the move that costs least first among those that
    /// bring the VMs closer to fitting, the moves together costing less than `limit` more than
    /// before. Returns the moves (job, candidate it left), oldest first, and what they cost more;
    /// `None`, with nothing moved, when no such chain is found within `budget` tries.
    fn make_room_within(
        &mut self,
        offer: usize,
        vms: u32,
        depth: u32,
        limit: f64,
        moved: &mut Vec<usize>,
        budget: &mut usize,
    ) -> Option<(Vec<(usize, usize)>, f64)> {
        let mut log = Vec::new();
        let mut spent = 0.0;
        loop {
            let needs = self.lacks_vms(offer, vms);
            if needs.is_empty() {
                return Some((log, spent));
            }
            let lack = self.lack(offer, vms);
            // Every move of a holder to another candidate of its own within what is left to spend,
            // the cheapest per share of the lack it frees first (one job freeing all of it before
            // the first of ten that free a tenth each).
            let mut moves: Vec<(f64, f64, usize, usize)> = Vec::new();
            for o in self.offers_using(&needs) {
                for &i in self.on_offer[o].iter().filter(|i| !moved.contains(i)) {
                    let here = self.cost_of(i);
                    let ki = self.slot[i] as usize;
                    let share = needs.iter().map(|&(r, d)| self.held(i, r).min(d) as f64 / d as f64).sum::<f64>()
                        / needs.len() as f64;
                    for (k, c) in self.inst.cands_of(i).iter().enumerate() {
                        let delta = c.cost - here;
                        // At the chain's last level only moves to where there is room now (checked
                        // with the holder still in place: a cheap test that rarely misses one).
                        if k != ki && spent + delta < limit && c.offer != offer && (depth > 0 || self.fits(i, k)) {
                            let rank = if delta > 0.0 { delta / share } else { delta * share };
                            moves.push((rank, delta, i, k));
                        }
                    }
                }
            }
            moves.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3)));
            let mut progressed = false;
            for (_, delta, i, k) in moves {
                if *budget == 0 {
                    break;
                }
                *budget -= 1;
                let ki = self.remove(i);
                moved.push(i);
                let c = *self.cand(i, k);
                let sub = if self.fits(i, k) {
                    Some((Vec::new(), 0.0))
                } else if depth > 0 {
                    self.make_room_within(c.offer, c.vms, depth - 1, limit - spent - delta, moved, budget)
                } else {
                    None
                };
                if let Some((sub, sub_spent)) = sub {
                    if self.fits(i, k) {
                        self.put(i, k);
                        if self.lack(offer, vms) < lack - 1e-9 {
                            log.extend(sub);
                            log.push((i, ki));
                            spent += delta + sub_spent;
                            progressed = true;
                            break;
                        }
                        self.remove(i);
                    }
                    self.undo(sub);
                }
                moved.pop();
                self.put(i, ki);
            }
            if !progressed {
                self.undo(log);
                return None;
            }
        }
    }

    /// Cost placed: the gang jobs and the pieces not taken out.
    fn placed_cost(&self) -> f64 {
        let gangs: f64 = (0..self.slot.len()).filter(|&j| self.slot[j] != NONE).map(|j| self.cost_of(j)).sum();
        gangs + self.fixed.iter().zip(&self.out).filter(|(_, out)| !**out).map(|(a, _)| a.cost).sum::<f64>()
    }

    fn cost_of(&self, j: usize) -> f64 {
        self.cand(j, self.slot[j] as usize).cost
    }

    /// Moves placed job `j` to candidate `k` after moving one job that holds the room to another
    /// candidate, if the two moves together cost less.
    fn swap_in(&mut self, j: usize, k: usize, old_cost: f64) -> bool {
        let c = *self.cand(j, k);
        let old_k = self.slot[j] as usize;
        self.remove(j);
        let needs = self.lacks(&c);
        // Holders of one shape on one offer all move to the same candidate, if any (see
        // `Class::shape`): tried once, then priced per holder.
        let mut moves: Vec<((usize, usize), u32)> = Vec::new();
        for i in self.covering_holders(&needs) {
            let i_old = self.slot[i] as usize;
            let i_cost = self.cand(i, i_old).cost;
            let inst = self.inst;
            let saves = |to: usize| {
                c.cost - old_cost + inst.cands_of(i)[to].cost - i_cost < -EPS * (old_cost + i_cost).max(1.0)
            };
            let group = (self.inst.shape_of(i), self.cand(i, i_old).offer);
            if let Some(&(_, to)) = moves.iter().find(|(g, _)| *g == group) {
                if to != NONE && saves(to as usize) {
                    self.remove(i);
                    self.put(j, k);
                    self.put(i, to as usize);
                    return true;
                }
                continue;
            }
            let mut to = NONE;
            self.remove(i);
            if self.fits(j, k) {
                self.put(j, k);
                if self.insert(i) {
                    to = self.slot[i];
                    if saves(to as usize) {
                        return true;
                    }
                    self.remove(i);
                }
                self.remove(j);
            }
            self.put(i, i_old);
            moves.push((group, to));
        }
        self.put(j, old_k);
        false
    }
}

/// A fixed-seed pseudo-random sequence (xorshift64): the kicks' choices, the same on every run so that
/// solving twice gives the same plan.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 + Clone {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// The weight a gang job places when it is placed whole: priority × GPUs.
pub(crate) fn weight(inst: &Instance, j: usize) -> f64 {
    inst.weight[j]
}

/// The Lagrangian heuristic: jobs by their weight net of the cheapest resources they could use at
/// per-VM offer prices `price` (most first; jobs the prices rule out last, by weight), each on the
/// candidate whose resources cost least at those prices, the cheaper in money on a tie.
pub(crate) fn construct(inst: &Instance, price: &[f64]) -> Sol {
    let p = inst.p;
    let mut score: Vec<(f64, f64, usize)> = (0..p.jobs.len())
        .map(|j| {
            let job = inst.job(j);
            let prio = f64::from(job.priority);
            let net = inst
                .cands_of(j)
                .iter()
                .map(|c| {
                    if job.gang {
                        prio * f64::from(job.gpus) - f64::from(c.vms) * price[c.offer]
                    } else {
                        (prio - price[c.offer] / f64::from(c.gpus)) * f64::from(job.gpus)
                    }
                })
                .fold(f64::NEG_INFINITY, f64::max);
            (net, weight(inst, j), j)
        })
        .collect();
    // Positive net weight first, most first; then the rest by weight (a greedy fill).
    score.sort_by(|a, b| {
        let pa = a.0 > 0.0;
        let pb = b.0 > 0.0;
        pb.cmp(&pa).then_with(|| if pa { b.0.total_cmp(&a.0) } else { b.1.total_cmp(&a.1) }).then(a.2.cmp(&b.2))
    });
    let mut sol = Sol::new(inst);
    let mut order: Vec<usize> = Vec::new();
    for &(_, _, j) in &score {
        let job = inst.job(j);
        let cands = inst.cands_of(j);
        order.clear();
        order.extend(0..cands.len());
        let key = |c: &Cand| {
            if job.gang { f64::from(c.vms) * price[c.offer] } else { price[c.offer] / f64::from(c.gpus) }
        };
        // Stable: equal resource prices keep the money ranking.
        order.sort_by(|&a, &b| key(&cands[a]).total_cmp(&key(&cands[b])));
        sol.place(inst, j, order.iter().map(|&k| &cands[k]));
    }
    sol
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Problem;

    /// Three regions of one 4-vCPU VM each (their `cores`), eastus cheapest, centralus dearest;
    /// jobs `x`, `y` and `j` of 1 GPU, each of the given priority and allowed regions.
    fn three_regions(priorities: [u32; 3], regions: [&str; 3]) -> Problem {
        let offer = |region: &str, price: f64| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_NC4as_T4_v3", "priority": "regular",
                    "gpu_model": "T4", "gpus_per_vm": 1, "vcpus_per_vm": 4,
                    "family": "standardNCASv3_T4Family", "price_per_hour": {price}}}"#
            )
        };
        let quota = |region: &str| {
            format!(
                r#"{{"region": "{region}", "pool": "cores", "vcpus": 4}},
                   {{"region": "{region}", "pool": "standardNCASv3_T4Family", "vcpus": 100}}"#
            )
        };
        let job = |id: &str, priority: u32, regions: &str| {
            format!(
                r#"{{"id": "{id}", "gpus": 1, "gpu_models": ["T4"], "priority": {priority},
                    "duration_hours": 1, "regions": [{regions}]}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}, {}], "quotas": [{}, {}, {}], "jobs": [{}, {}, {}]}}"#,
            offer("eastus", 1.0),
            offer("westus", 2.0),
            offer("centralus", 3.0),
            quota("eastus"),
            quota("westus"),
            quota("centralus"),
            job("x", priorities[0], regions[0]),
            job("y", priorities[1], regions[1]),
            job("j", priorities[2], regions[2]),
        );
        Problem::from_json_str(&json).expect("valid problem")
    }

    /// `x` runs in eastus or westus, `y` in westus or centralus, `j` only in eastus, all of
    /// priority 1. With `x` in eastus and `y` in westus, `j` fits only after `y` moves to centralus
    /// and `x` to westus: no job is lighter than `j`, so no ejection helps, and `x` alone has
    /// nowhere to go.
    fn chain() -> Problem {
        three_regions([1, 1, 1], [r#""eastus", "westus""#, r#""westus", "centralus""#, r#""eastus""#])
    }

    /// The packing of [`chain`] with `x` and `y` on their cheapest candidates and `j` waiting.
    fn stuck<'i, 'a>(inst: &'i Instance<'a>) -> Packing<'i, 'a> {
        let mut pack = Packing::from_sol(inst, &Sol::new(inst));
        assert!(pack.insert(0) && pack.insert(1), "x and y fit");
        assert!(!pack.fits(2, 0), "j waits");
        pack
    }

    /// One 1-GPU offer (1 USD an hour) with room for eight VMs (its `cores`), all held by split job
    /// `low` (priority 1, eight GPUs), and split job `high` of the given GPUs, priority 5 and price
    /// cap, on the same offer only. Returns the GPUs each has once the weight search is done, with
    /// pieces taken in part or not.
    fn low_and_high(high_gpus: u32, high_cap: f64, part_pieces: bool) -> (u32, u32) {
        let json = format!(
            r#"{{"offers": [{{"region": "eastus", "size": "Standard_NC4as_T4_v3", "priority": "regular",
                "gpu_model": "T4", "gpus_per_vm": 1, "vcpus_per_vm": 4, "family": "standardNCASv3_T4Family",
                "price_per_hour": 1.0}}],
            "quotas": [{{"region": "eastus", "pool": "cores", "vcpus": 32}}],
            "jobs": [{{"id": "low", "gpus": 8, "gpu_models": ["T4"], "gang": false, "priority": 1,
                       "duration_hours": 1}},
                     {{"id": "high", "gpus": {high_gpus}, "gpu_models": ["T4"], "gang": false, "priority": 5,
                      "duration_hours": 1, "max_price_per_hour": {high_cap}}}]}}"#
        );
        let p = Problem::from_json_str(&json).expect("valid problem");
        let inst = Instance::new(&p);
        let mut sol = Sol::new(&inst);
        let low = inst.cands_of(0)[0];
        assert_eq!(sol.fill(&inst, 0, &low, u32::MAX), 8, "low holds all eight VMs");
        let mut pack = Packing::from_sol(&inst, &sol);
        pack.part_pieces = part_pieces;
        pack.improve_weight(None);
        let plan = crate::finish(&inst, &pack.to_sol(), "test", &[], Instant::now());
        crate::check(&p, &plan).expect("feasible");
        let gpus = |id: &str| plan.placements.iter().filter(|a| a.job == id).map(|a| a.gpus).sum::<u32>();
        assert_eq!(f64::from(gpus("low") + 5 * gpus("high")), pack.placed_weight());
        (gpus("low"), gpus("high"))
    }

    #[test]
    fn a_split_job_takes_one_vm_of_a_lighter_piece_not_the_whole_piece() {
        // Taking low's piece out whole loses 8 for 5; one VM of it loses 1.
        assert_eq!(low_and_high(1, 100.0, true), (7, 1));
        assert_eq!(low_and_high(1, 100.0, false), (8, 0), "the piece is taken whole or not at all");
    }

    #[test]
    fn a_split_job_takes_the_part_its_price_cap_allows() {
        // All eight GPUs cost 8 USD an hour, over high's cap: four of them fit it.
        assert_eq!(low_and_high(8, 4.0, true), (4, 4));
        assert_eq!(low_and_high(8, 4.0, false), (8, 0), "all it needs or nothing");
    }

    #[test]
    fn kicks_take_split_jobs_pieces_out_where_no_job_is_a_gang() {
        let mut p = Problem::from_json_str(include_str!("../tests/data/all-spot-300-2.json")).expect("valid problem");
        for job in &mut p.jobs {
            job.gang = false;
        }
        let inst = Instance::new(&p);
        let mut pack = Packing::from_sol(&inst, &crate::greedy(&inst));
        assert!(pack.part_pieces, "300 jobs");
        pack.improve_weight(None);
        let searched = pack.placed_weight();
        {
            let plan = crate::finish(&inst, &pack.to_sol(), "test", &[], Instant::now());
            crate::check(&p, &plan).expect("feasible after the search");
        }
        pack.kick(20, None);
        assert!(
            pack.placed_weight() > searched + 0.5,
            "{searched} -> {}: the kicks found nothing",
            pack.placed_weight()
        );
        let plan = crate::finish(&inst, &pack.to_sol(), "test", &[], Instant::now());
        crate::check(&p, &plan).expect("feasible");
    }

    #[test]
    fn jobs_that_differ_only_in_priority_share_a_shape() {
        let p = three_regions([1, 2, 1], [r#""eastus", "westus""#, r#""eastus", "westus""#, r#""eastus""#]);
        let inst = Instance::new(&p);
        assert_ne!(inst.job_class[0], inst.job_class[1], "two priorities, two classes");
        assert_eq!(inst.shape_of(0), inst.shape_of(1), "the same offers");
        assert_ne!(inst.shape_of(0), inst.shape_of(2), "j runs in one region only");
    }

    #[test]
    fn a_state_is_named_by_its_free_resources() {
        let p = chain();
        let inst = Instance::new(&p);
        let mut pack = stuck(&inst);
        let named = |pack: &Packing| pack.free.iter().enumerate().fold(0, |h, (r, &f)| h ^ no_room::term(r, f));
        let before = pack.state;
        assert_eq!(before, named(&pack), "kept up to date by every move");
        let k = pack.remove(0);
        assert_ne!(pack.state, before, "x's room is free");
        assert_eq!(pack.state, named(&pack));
        pack.put(0, k);
        assert_eq!(pack.state, before, "the same state, whatever the path");
    }

    #[test]
    fn a_layout_is_named_by_who_holds_the_room() {
        // x and y (one shape, two priorities) both want eastus's one VM.
        let p = three_regions([3, 1, 2], [r#""eastus""#; 3]);
        let inst = Instance::new(&p);
        let mut pack = Packing::from_sol(&inst, &Sol::new(&inst));
        pack.put(0, 0);
        let (state, layout) = (pack.state, pack.layout);
        pack.remove(0);
        pack.put(1, 0);
        assert_eq!(pack.state, state, "the same room is free");
        assert_ne!(pack.layout, layout, "another job holds it: ejecting it loses other weight");
        pack.remove(1);
        pack.put(0, 0);
        assert_eq!(pack.layout, layout);
    }

    #[test]
    fn a_failed_insert_is_remembered_for_its_shape_in_that_state_only() {
        // All three run in eastus only, one VM's room: x placed, y and j (another priority, the
        // same shape) wait.
        let p = three_regions([3, 1, 2], [r#""eastus""#; 3]);
        let inst = Instance::new(&p);
        let mut pack = Packing::from_sol(&inst, &Sol::new(&inst));
        assert!(pack.insert(0));
        assert!(!pack.insert(1), "no room for y");
        assert!(
            pack.no_room.known(pack.state, inst.shape_of(2), Look::Insert, 1.0),
            "nor for j, known without looking"
        );
        assert!(!pack.insert(2));
        pack.remove(0);
        assert!(pack.insert(2), "x's room is j's once x is out");
    }

    #[test]
    fn room_is_made_by_a_chain_of_moves() {
        let p = chain();
        let inst = Instance::new(&p);
        let mut pack = stuck(&inst);
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 2.0, "without moving jobs, j waits");
        pack.room = RoomMaking::Chains;
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 3.0, "x and y move, j is placed");
        let region = |j: usize| &p.offers[pack.cand(j, pack.slot[j] as usize).offer].region;
        assert_eq!((region(0).as_str(), region(1).as_str(), region(2).as_str()), ("westus", "centralus", "eastus"));
        let sol = pack.to_sol();
        let plan = crate::finish(&inst, &sol, "test", &[], Instant::now());
        assert_eq!(plan.placements.len(), 3);
        crate::check(&p, &plan).expect("feasible");
    }

    /// `x` (priority 3) runs in eastus or westus, `y` (1) only in westus, `j` (2) only in eastus:
    /// with `x` in eastus and `y` in westus, the most weight (5) has `x` move to westus and `y`
    /// wait. `x` is heavier than `j`, so no ejection takes it out, and westus is full, so it cannot
    /// simply move.
    #[test]
    fn a_heavier_holder_moves_where_a_lighter_job_makes_way() {
        let p = three_regions([3, 1, 2], [r#""eastus", "westus""#, r#""westus""#, r#""eastus""#]);
        let inst = Instance::new(&p);
        let mut pack = stuck(&inst);
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 4.0, "without room-making, j waits");
        pack.room = RoomMaking::Chains;
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 4.0, "chains alone do not take y out");
        pack.room = RoomMaking::ChainsAndEjections;
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 5.0, "x moves to westus, y waits, j is placed");
        assert_eq!((pack.slot[1], pack.slot[2]), (NONE, 0));
    }

    #[test]
    fn a_holder_that_can_move_away_is_not_counted_lost() {
        let p = chain();
        let inst = Instance::new(&p);
        let mut pack = stuck(&inst);
        let eastus = pack.lacks(pack.cand(2, 0));
        // y has centralus, away from eastus; x's only other place, westus, is full.
        pack.room = RoomMaking::ChainsAndEjections;
        assert_eq!((pack.lost_weight(0, &eastus), pack.lost_weight(1, &eastus)), (1.0, 0.0));
        pack.room = RoomMaking::Chains;
        assert_eq!(pack.lost_weight(1, &eastus), 1.0, "counted lost otherwise");
    }

    /// [`chain`] with `y` a split job whose one GPU is a piece in westus: `j` fits in eastus once
    /// `x` moves to westus, which takes the piece moving to centralus, the other place of `y`.
    #[test]
    fn a_split_jobs_piece_moves_to_make_room() {
        let mut p = chain();
        p.jobs[1].gang = false;
        piece_moves_to_make_room(&p);
        // centralus with no quota listed and no capacity stated: no limit, room for the piece.
        p.quotas.retain(|q| q.region != "centralus");
        piece_moves_to_make_room(&p);
    }

    fn piece_moves_to_make_room(p: &Problem) {
        let inst = Instance::new(p);
        let mut sol = Sol::new(&inst);
        let in_westus = *inst.cands_of(1).iter().find(|c| p.offers[c.offer].region == "westus").expect("a candidate");
        sol.take(&inst, Assign { job: 1, offer: in_westus.offer, vms: 1, gpus: 1, cost: in_westus.cost });
        let mut pack = Packing::from_sol(&inst, &sol);
        assert!(pack.insert(0) && !pack.fits(2, 0), "x in eastus, j waits");
        let before = pack.free.clone();
        let offer = pack.cand(2, 0).offer;
        let (mut moved, mut budget) = (Vec::new(), ROOM_BUDGET);
        let log = pack.make_room(offer, 1, 1, &mut moved, &mut budget).expect("room made");
        assert_eq!(log.len(), 2, "the piece, then x");
        pack.undo(log);
        assert_eq!((pack.free.clone(), pack.fixed.len(), pack.out.clone()), (before, 1, vec![false]), "undone");
        pack.room = RoomMaking::Chains;
        pack.improve_weight(None);
        assert_eq!(pack.placed_weight(), 3.0, "the piece and x move, j is placed");
        let plan = crate::finish(&inst, &pack.to_sol(), "test", &[], Instant::now());
        crate::check(p, &plan).expect("feasible");
        let y: Vec<&str> = plan.placements.iter().filter(|q| q.job == "y").map(|q| q.region.as_str()).collect();
        assert_eq!(y, ["centralus"]);
    }

    /// Regions of one 4-vCPU VM each, eastus cheapest; `j` (10 hours) in northeurope, ten times
    /// eastus's price, because `x` holds eastus and `y` westus, the only other place of `x`.
    /// Moving `j` to eastus saves far more than moving `y` to centralus and `x` to westus costs,
    /// but no swap of two jobs does it.
    pub(crate) fn dear_job_behind_a_chain() -> Problem {
        let offer = |region: &str, price: f64| {
            format!(
                r#"{{"region": "{region}", "size": "Standard_NC4as_T4_v3", "priority": "regular",
                    "gpu_model": "T4", "gpus_per_vm": 1, "vcpus_per_vm": 4,
                    "family": "standardNCASv3_T4Family", "price_per_hour": {price}}}"#
            )
        };
        let quota = |region: &str| format!(r#"{{"region": "{region}", "pool": "cores", "vcpus": 4}}"#);
        let job = |id: &str, hours: u32, regions: &str| {
            format!(
                r#"{{"id": "{id}", "gpus": 1, "gpu_models": ["T4"], "duration_hours": {hours},
                    "regions": [{regions}]}}"#
            )
        };
        let json = format!(
            r#"{{"offers": [{}, {}, {}, {}], "quotas": [{}, {}, {}, {}], "jobs": [{}, {}, {}]}}"#,
            offer("eastus", 1.0),
            offer("westus", 2.0),
            offer("centralus", 3.0),
            offer("northeurope", 10.0),
            quota("eastus"),
            quota("westus"),
            quota("centralus"),
            quota("northeurope"),
            job("x", 1, r#""eastus", "westus""#),
            job("y", 1, r#""westus", "centralus""#),
            job("j", 10, r#""eastus", "northeurope""#),
        );
        Problem::from_json_str(&json).expect("valid problem")
    }

    /// [`dear_job_behind_a_chain`]'s worst plan: every job on its first candidate (x in eastus,
    /// y in westus, j in northeurope), 103 USD.
    pub(crate) fn dear_job_chain_at_its_worst(inst: &Instance) -> Sol {
        let mut sol = Sol::new(inst);
        for j in 0..3 {
            sol.place(inst, j, inst.cands_of(j));
        }
        assert!((sol.cost() - 103.0).abs() < 1e-6, "x in eastus, y in westus, j in northeurope");
        sol
    }

    #[test]
    fn a_dear_job_moves_after_a_chain_of_cheaper_moves() {
        let p = dear_job_behind_a_chain();
        let inst = Instance::new(&p);
        let mut pack = Packing::from_sol(&inst, &Sol::new(&inst));
        assert!(pack.insert(0) && pack.insert(1) && pack.insert(2), "x in eastus, y in westus, j in northeurope");
        assert!((pack.placed_cost() - 103.0).abs() < 1e-6);
        pack.improve_cost(None);
        assert!((pack.placed_cost() - 103.0).abs() < 1e-6, "no move of one or two jobs helps");
        pack.improve_cost_making_room(0.005, None);
        assert!((pack.placed_cost() - 15.0).abs() < 1e-6, "y and x move, j takes eastus");
        let region = |j: usize| p.offers[pack.cand(j, pack.slot[j] as usize).offer].region.as_str();
        assert_eq!([region(0), region(1), region(2)], ["westus", "centralus", "eastus"]);
    }

    #[test]
    fn moves_that_make_no_room_are_taken_back() {
        let p = chain();
        let inst = Instance::new(&p);
        let mut pack = stuck(&inst);
        // Depth 0: x may only move where it fits now, and westus is full.
        let offer = pack.cand(2, 0).offer;
        let (mut moved, mut budget) = (Vec::new(), ROOM_BUDGET);
        assert!(pack.make_room(offer, 1, 0, &mut moved, &mut budget).is_none());
        assert_eq!((pack.slot[0], pack.slot[1]), (0, 0), "x and y where they were");
        assert_eq!(pack.free, stuck(&inst).free, "every resource as it was");
        // No budget: nothing is tried.
        let (mut moved, mut budget) = (Vec::new(), 0);
        assert!(pack.make_room(offer, 1, 1, &mut moved, &mut budget).is_none());
        let (mut moved, mut budget) = (Vec::new(), ROOM_BUDGET);
        let log = pack.make_room(offer, 1, 1, &mut moved, &mut budget).expect("room made");
        assert_eq!(log.len(), 2, "y, then x");
        pack.undo(log);
        assert_eq!(pack.free, stuck(&inst).free, "undone");
    }
}
