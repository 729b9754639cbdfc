//! Cover cuts on the quota and capacity rows, for the exact MILP's relaxation.
//!
//! The LP relaxation places parts of gang jobs: half of a 64-GPU job fills what is left of a pool.
//! A set of jobs whose smallest footprints in a row together exceed its limit cannot all be placed
//! there: `Σ (job in the row) ≤ |set| − 1`. Added where the LP's point breaks them, they raise the
//! relaxation toward the integer optimum, which both prunes the search and lets reduced costs fix
//! more (see `reduced_cost`).

use crate::milp::Row;
use crate::reduced_cost::Domains;

/// One gang job in a row: which job, its footprint there (pool rows: its smallest; the weight row:
/// its weight) and how much of it the LP's point places there.
struct Item {
    job: usize,
    size: f64,
    placed: f64,
}

/// Cuts that `x` (an LP point) breaks, at most one per row: an extended cover on each row whose
/// coefficients are all non-negative (pools, capacities), and on each whose coefficients are all
/// non-positive (the cost phase's "at least this weight"). `gang_of`: the single gang job a
/// variable is a candidate of (at most one candidate of each is 1).
pub(crate) fn separate(rows: &[&Row], gang_of: &[Option<usize>], d: &Domains, x: &[f64]) -> Vec<Row> {
    // Jobs placed for certain (a candidate at least 1) are out of every cover: their footprint is
    // already taken off the rows.
    let mut certain = vec![false; gang_of.len()];
    for (v, g) in gang_of.iter().enumerate() {
        if let Some(g) = *g
            && d.min[v] >= 1.0
        {
            certain[g] = true;
        }
    }
    let mut cuts = Vec::new();
    for r in rows {
        if r.terms.iter().all(|&(_, a)| a <= 0.0) {
            cuts.extend(covering(r, gang_of, d, x));
        } else if r.terms.iter().all(|&(_, a)| a >= 0.0) {
            cuts.extend(packing(r, gang_of, &certain, d, x));
        }
    }
    cuts
}

/// A cover cut on a packing row (`Σ a x ≤ b`, `a ≥ 0`): jobs whose smallest footprints together
/// exceed what the row has left cannot all be placed there, `Σ (job in the row) ≤ |cover| − 1`.
fn packing(r: &Row, gang_of: &[Option<usize>], certain: &[bool], d: &Domains, x: &[f64]) -> Option<Row> {
    let rhs = r.rhs - r.terms.iter().map(|&(v, a)| a * d.min[v]).sum::<f64>();
    if rhs < 0.0 {
        return None;
    }
    let mut items = items(r, gang_of, d, x, |g| !certain[g], f64::min);
    // The cover the point comes closest to filling: least (1 − z) per unit of footprint first.
    items.sort_by(|a, b| ((1.0 - a.placed) / a.size).total_cmp(&((1.0 - b.placed) / b.size)));
    let cover = cover(&items, rhs)?;
    let placed: f64 = cover.iter().map(|&k| items[k].placed).sum();
    let size = cover.len() as f64;
    if placed <= size - 1.0 + 1e-6 {
        return None;
    }
    let members = extended(&items, &cover);
    Some(Row { terms: terms(r, gang_of, d, &members, 1.0), rhs: size - 1.0 })
}

/// A cut on a covering row (`Σ w x ≥ R` written `−Σ w x ≤ −R`: the cost phase's "at least this
/// weight"): the jobs left out are a knapsack of capacity `Σ w − R`, so a set of jobs heavier than
/// that together cannot all be left out: at least one of them is placed.
fn covering(r: &Row, gang_of: &[Option<usize>], d: &Domains, x: &[f64]) -> Option<Row> {
    let mut items = items(r, gang_of, d, x, |_| true, f64::max);
    // What the variables of no single gang job can add at most.
    let others: f64 =
        r.terms.iter().filter(|&&(v, _)| gang_of[v].is_none() && d.max[v] >= 0.5).map(|&(v, a)| -a * d.max[v]).sum();
    let cap = others + items.iter().map(|i| i.size).sum::<f64>() + r.rhs;
    if cap < 0.0 {
        return None;
    }
    // The jobs the point leaves out first (the heavier first), then the least placed: a heavy job
    // the point places in full would fill the cover at once and hide the cut.
    items.sort_by(|a, b| a.placed.total_cmp(&b.placed).then(b.size.total_cmp(&a.size)));
    let cover = cover(&items, cap)?;
    let placed: f64 = cover.iter().map(|&k| items[k].placed).sum();
    if placed >= 1.0 - 1e-6 {
        return None;
    }
    let members = extended(&items, &cover);
    let extra = (members.len() - cover.len()) as f64;
    Some(Row { terms: terms(r, gang_of, d, &members, -1.0), rhs: -(extra + 1.0) })
}

/// The row's single gang jobs that `keep` keeps, each with its footprint (the candidates' sizes,
/// `|a|`, folded by `fold`) and its share placed at `x`; candidates fixed at 0 left out.
fn items(
    r: &Row,
    gang_of: &[Option<usize>],
    d: &Domains,
    x: &[f64],
    keep: impl Fn(usize) -> bool,
    fold: fn(f64, f64) -> f64,
) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    for &(v, a) in &r.terms {
        let Some(job) = gang_of[v] else { continue };
        if d.max[v] < 0.5 || !keep(job) {
            continue;
        }
        match items.iter_mut().find(|i| i.job == job) {
            Some(i) => {
                i.size = fold(i.size, a.abs());
                i.placed += x[v];
            }
            None => items.push(Item { job, size: a.abs(), placed: x[v] }),
        }
    }
    items
}

/// The first items, in their order, whose sizes together exceed `cap`; `None` when all of them do not.
fn cover(items: &[Item], cap: f64) -> Option<Vec<usize>> {
    let tolerance = 1e-9 * cap.abs().max(1.0);
    let mut total = 0.0;
    for (k, i) in items.iter().enumerate() {
        total += i.size;
        if total > cap + tolerance {
            return Some((0..=k).collect());
        }
    }
    None
}

/// The cover extended by every item at least as large as its largest: the jobs of the cut.
fn extended(items: &[Item], cover: &[usize]) -> Vec<usize> {
    let largest = cover.iter().map(|&k| items[k].size).fold(0.0, f64::max);
    items.iter().enumerate().filter(|(k, i)| cover.contains(k) || i.size >= largest).map(|(_, i)| i.job).collect()
}

/// The cut's terms: `coefficient` on every candidate in the row, not fixed at 0, of the jobs `members`.
fn terms(r: &Row, gang_of: &[Option<usize>], d: &Domains, members: &[usize], coefficient: f64) -> Vec<(usize, f64)> {
    r.terms
        .iter()
        .filter(|&&(v, _)| d.max[v] >= 0.5 && gang_of[v].is_some_and(|g| members.contains(&g)))
        .map(|&(v, _)| (v, coefficient))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No cut removes a plan: on 500 random models of single gang jobs (each on one of its
    /// candidates or none) with pool rows and an "at least this weight" row, some candidates fixed
    /// at 0 and some jobs at 1, cut at random LP points,
    /// every integer plan of the model keeps every cut (fails when a cover is not one, or the
    /// extension or the covering row's complement is wrong).
    #[test]
    fn cuts_keep_every_plan() {
        let mut next = crate::search::xorshift(0x2545_f491_4f6c_dd1d);
        let mut below = |n: u64| next() % n;
        let mut cut_count = 0;
        for case in 0..500 {
            let jobs = 2 + below(5) as usize;
            let mut gang_of = Vec::new();
            let mut weight = Vec::new();
            let mut choices: Vec<Vec<usize>> = Vec::new();
            for j in 0..jobs {
                let w = (1 + below(20)) as f64;
                let k = 1 + below(3) as usize;
                choices.push((gang_of.len()..gang_of.len() + k).collect());
                for _ in 0..k {
                    gang_of.push(Some(j));
                    weight.push(w);
                }
            }
            let n = gang_of.len();
            let mut rows = crate::milp::random_rows(n, 2, 14, &mut below);
            // Every plan: each job on one of its candidates or none.
            let mut plans: Vec<Vec<f64>> = vec![vec![0.0; n]];
            for c in &choices {
                plans = plans
                    .into_iter()
                    .flat_map(|p| {
                        std::iter::once(p.clone()).chain(c.iter().map(move |&v| {
                            let mut q = p.clone();
                            q[v] = 1.0;
                            q
                        }))
                    })
                    .collect();
            }
            let holds = |r: &Row, p: &Vec<f64>| r.terms.iter().map(|&(v, a)| a * p[v]).sum::<f64>() <= r.rhs + 1e-9;
            plans.retain(|p| rows.iter().all(|r| holds(r, p)));
            let most = plans.iter().map(|p| p.iter().zip(&weight).map(|(x, w)| x * w).sum::<f64>()).fold(0.0, f64::max);
            let need = most - below(6) as f64;
            rows.push(Row { terms: weight.iter().enumerate().map(|(v, w)| (v, -w)).collect(), rhs: -need });
            plans.retain(|p| holds(rows.last().unwrap(), p));
            // Domains as the fixing leaves them: some candidates fixed at 0, some jobs at 1.
            let mut d = Domains { min: vec![0.0; n], max: vec![1.0; n] };
            for c in &choices {
                for &v in c {
                    match below(8) {
                        0 => d.max[v] = 0.0,
                        1 if c.iter().all(|&u| d.min[u] == 0.0) => d.min[v] = 1.0,
                        _ => {}
                    }
                }
            }
            plans.retain(|p| p.iter().enumerate().all(|(v, &x)| d.min[v] <= x && x <= d.max[v]));
            let refs: Vec<&Row> = rows.iter().collect();
            for _ in 0..4 {
                let x: Vec<f64> = (0..n).map(|_| below(101) as f64 / 100.0 / 2.0).collect();
                for cut in separate(&refs, &gang_of, &d, &x) {
                    cut_count += 1;
                    for p in &plans {
                        assert!(holds(&cut, p), "case {case}: cut {:?} ≤ {} removes plan {p:?}", cut.terms, cut.rhs);
                    }
                }
            }
        }
        assert!(cut_count > 100, "only {cut_count} cuts: the test checks too little");
    }
}
