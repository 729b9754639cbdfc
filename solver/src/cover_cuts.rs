//! Cover cuts on the quota and capacity rows, for the exact MILP's relaxation.
//!
//! The LP relaxation places parts of gang jobs: half of a 64-GPU job fills what is left of a pool.
//! A set of jobs whose smallest footprints in a row together exceed its limit cannot all be placed
//! there: `Σ (job in the row) ≤ |set| − 1`. Added where the LP's point breaks them, they raise the
//! relaxation toward the integer optimum, which both prunes the search and lets reduced costs fix
//! more (see `reduced_cost`).

use crate::milp::Row;

/// Cuts that `x` (an LP point) breaks: at most one extended cover per row whose coefficients are all
/// non-negative. `gangs`: the candidates of each single gang job (at most one of each is 1).
pub(crate) fn separate(
    rows: &[&Row],
    gang_of: &[Option<usize>],
    d: &crate::reduced_cost::Domains,
    x: &[f64],
) -> Vec<Row> {
    let mut cuts = Vec::new();
    // Jobs placed for certain (a candidate at least 1) are out of every cover: their footprint is
    // already taken off the rows.
    let mut placed = std::collections::HashSet::new();
    for (v, g) in gang_of.iter().enumerate() {
        if let Some(g) = g
            && d.min[v] >= 1.0
        {
            placed.insert(*g);
        }
    }
    for r in rows {
        if r.terms.iter().all(|&(_, a)| a <= 0.0) {
            cuts.extend(covering(r, gang_of, d, x));
            continue;
        }
        if r.terms.iter().any(|&(_, a)| a < 0.0) {
            continue;
        }
        let rhs = r.rhs - r.terms.iter().map(|&(v, a)| a * d.min[v]).sum::<f64>();
        if rhs < 0.0 {
            continue;
        }
        // Per job in the row: its smallest footprint there, and how much of it the point places there.
        let mut items: Vec<(usize, f64, f64)> = Vec::new();
        for &(v, a) in &r.terms {
            let Some(g) = gang_of[v] else { continue };
            if d.max[v] < 0.5 || placed.contains(&g) {
                continue;
            }
            match items.iter_mut().find(|i| i.0 == g) {
                Some(i) => {
                    i.1 = i.1.min(a);
                    i.2 += x[v];
                }
                None => items.push((g, a, x[v])),
            }
        }
        if items.iter().map(|i| i.1).sum::<f64>() <= rhs + 1e-9 {
            continue;
        }
        // The cover the point comes closest to filling: least (1 − z) per unit of footprint first.
        items.sort_by(|a, b| ((1.0 - a.2) / a.1).total_cmp(&((1.0 - b.2) / b.1)));
        let mut used = 0.0;
        let mut cover = Vec::new();
        for (k, i) in items.iter().enumerate() {
            cover.push(k);
            used += i.1;
            if used > rhs + 1e-9 {
                break;
            }
        }
        if used <= rhs + 1e-9 {
            continue;
        }
        let placed: f64 = cover.iter().map(|&k| items[k].2).sum();
        let size = cover.len() as f64;
        if placed <= size - 1.0 + 1e-6 {
            continue;
        }
        // Extended: every job at least as large as the largest of the cover joins it.
        let largest = cover.iter().map(|&k| items[k].1).fold(0.0, f64::max);
        let members: Vec<usize> =
            items.iter().enumerate().filter(|(k, i)| cover.contains(k) || i.1 >= largest).map(|(_, i)| i.0).collect();
        let terms = r
            .terms
            .iter()
            .filter(|&&(v, _)| d.max[v] >= 0.5 && gang_of[v].is_some_and(|g| members.contains(&g)))
            .map(|&(v, _)| (v, 1.0))
            .collect();
        cuts.push(Row { terms, rhs: size - 1.0 });
    }
    cuts
}

/// A cut on a covering row (`Σ w x ≥ R` written `−Σ w x ≤ −R`: the cost phase's "at least this
/// weight"): the jobs left out are a knapsack of capacity `Σ w − R`, so a set of jobs heavier than
/// that together cannot all be left out: at least one of them is placed.
fn covering(r: &Row, gang_of: &[Option<usize>], d: &crate::reduced_cost::Domains, x: &[f64]) -> Option<Row> {
    let need = -r.rhs;
    // Per single gang job: the most it adds to the row and how much of it the point places.
    let mut items: Vec<(usize, f64, f64)> = Vec::new();
    let mut most = 0.0;
    for &(v, a) in &r.terms {
        let w = -a;
        if d.max[v] < 0.5 {
            continue;
        }
        match gang_of[v] {
            Some(g) => match items.iter_mut().find(|i| i.0 == g) {
                Some(i) => {
                    i.1 = i.1.max(w);
                    i.2 += x[v];
                }
                None => items.push((g, w, x[v])),
            },
            None => most += w * d.max[v],
        }
    }
    most += items.iter().map(|i| i.1).sum::<f64>();
    let cap = most - need;
    if cap < 0.0 {
        return None;
    }
    // The jobs the point leaves out first (the heavier first), then the least placed: a heavy job
    // the point places in full would fill the cover at once and hide the cut.
    items.sort_by(|a, b| a.2.total_cmp(&b.2).then(b.1.total_cmp(&a.1)));
    let mut out = 0.0;
    let mut cover = Vec::new();
    for (k, i) in items.iter().enumerate() {
        cover.push(k);
        out += i.1;
        if out > cap + 1e-9 * cap.abs().max(1.0) {
            break;
        }
    }
    if out <= cap + 1e-9 * cap.abs().max(1.0) {
        return None;
    }
    let placed: f64 = cover.iter().map(|&k| items[k].2).sum();
    if placed >= 1.0 - 1e-6 {
        return None;
    }
    let heaviest = cover.iter().map(|&k| items[k].1).fold(f64::INFINITY, f64::min);
    let heaviest = cover.iter().map(|&k| items[k].1).fold(heaviest, f64::max);
    let members: Vec<usize> =
        items.iter().enumerate().filter(|(k, i)| cover.contains(k) || i.1 >= heaviest).map(|(_, i)| i.0).collect();
    let extra = (members.len() - cover.len()) as f64;
    let terms = r
        .terms
        .iter()
        .filter(|&&(v, _)| d.max[v] >= 0.5 && gang_of[v].is_some_and(|g| members.contains(&g)))
        .map(|&(v, _)| (v, -1.0))
        .collect();
    Some(Row { terms, rhs: -(extra + 1.0) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduced_cost::Domains;

    /// No cut removes a plan: on 500 random models of single gang jobs (each on one of its
    /// candidates or none) with pool rows and an "at least this weight" row, cut at random LP points,
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
            let d = Domains { min: vec![0.0; n], max: vec![1.0; n] };
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
