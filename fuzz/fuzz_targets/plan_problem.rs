//! The plan problem format (`spillway plan`'s input): parsing must never panic, and a problem
//! small enough to solve quickly must solve without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(problem) = solver::Problem::from_json_str(text) else { return };
    if problem.jobs.len() <= 8 {
        let _ = solver::solve(&problem, &solver::SolveOptions::default());
    }
});
