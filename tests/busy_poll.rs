//! Busy polling (`--busy-poll-us`): one idle-priority thread spins after requests and parks when
//! they stop, observed through /proc.
use crate::common;

use common::*;

/// The state letter and scheduling policy of the server's busy-poll thread, if it has one.
#[cfg(target_os = "linux")]
fn spinner(s: &Server) -> Option<(char, u32)> {
    for task in std::fs::read_dir(format!("/proc/{}/task", s.pid())).ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == "nereus-busypoll" {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // After "(comm)": state is field 3, policy field 41.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            return Some((fields.first()?.chars().next()?, fields.get(38)?.parse().ok()?));
        }
    }
    None
}

#[cfg(target_os = "linux")]
#[test]
fn the_spinner_runs_at_idle_priority_only_while_requests_arrive() {
    const SCHED_IDLE: u32 = 5;
    let repo = Repo::new();
    repo.example("simple");
    // A window long enough to observe the spinning on a loaded machine, and no resting for lack of
    // spare CPU (a busy test machine would otherwise decide when it spins).
    let s = Server::start(repo.path(), &["--busy-poll-us", "1500000", "--busy-poll-min-spare-cpus", "0"]);
    s.wait_until("the spinner to start", || spinner(&s).is_some());
    let Some((_, policy)) = spinner(&s) else { unreachable!() };
    assert_eq!(policy, SCHED_IDLE);
    // Quiet after start: it parks (sleeping, 'S') once the window has passed.
    s.wait_until("the spinner to park", || spinner(&s).is_some_and(|(state, _)| state == 'S'));
    // A lone request after a quiet spell of a window leaves it parked (sparse traffic)...
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(spinner(&s).map(|(state, _)| state), Some('S'));
    // ... a second one within a window of it wakes it: runnable ('R') for the window after it...
    let r = s.post_json("/v2/models/simple/infer", &simple_request(2));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(spinner(&s).map(|(state, _)| state), Some('R'));
    // ... and it parks again when requests stop.
    s.wait_until("the spinner to park again", || spinner(&s).is_some_and(|(state, _)| state == 'S'));
}

/// Short of spare CPU (no machine has a thousand), the spinner rests — sleeping, not spinning —
/// although requests keep arriving within its window.
#[cfg(target_os = "linux")]
#[test]
fn the_spinner_rests_while_the_machine_has_no_cpu_to_spare() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--busy-poll-us", "60000000", "--busy-poll-min-spare-cpus", "1000"]);
    s.wait_until("the spinner to start", || spinner(&s).is_some());
    let mut sent = 0;
    s.wait_until("the spinner to rest while requests arrive", || {
        sent += 1;
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(sent)).status, 200);
        sent > 1 && spinner(&s).is_some_and(|(state, _)| state == 'S')
    });
}

#[cfg(target_os = "linux")]
#[test]
fn zero_turns_busy_polling_off() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--busy-poll-us", "0"]);
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(spinner(&s), None);
}
