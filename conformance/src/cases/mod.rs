//! The cases, by group. Each is a generic function over a [`Fixture`] that fails by panicking.

mod cancel;
mod close;
mod concurrency;
mod data;
mod deferred;
mod failures;
mod ids;
mod notifications;
mod peer_fault;
mod peers;
mod polling;
mod registration;
mod remove;
mod runs;
mod target;
mod telemetry;
mod validation;
mod waiting;

use crate::{Case, Fixture, Needs};

const PLAIN: Needs = Needs {
    faults: false,
    read: false,
    disconnect: false,
    revoke: false,
    notify: false,
};
const FAULTS: Needs = Needs {
    faults: true,
    ..PLAIN
};
const READ: Needs = Needs {
    read: true,
    ..PLAIN
};
const DISCONNECT: Needs = Needs {
    disconnect: true,
    ..PLAIN
};
const REVOKE: Needs = Needs {
    revoke: true,
    ..PLAIN
};
const NOTIFY: Needs = Needs {
    notify: true,
    ..PLAIN
};
const NOTIFY_READ: Needs = Needs {
    notify: true,
    read: true,
    ..PLAIN
};
const NOTIFY_FAULTS: Needs = Needs {
    notify: true,
    faults: true,
    ..PLAIN
};
const READ_REVOKE: Needs = Needs {
    read: true,
    revoke: true,
    ..PLAIN
};

macro_rules! case {
    ($group:ident :: $name:ident, $needs:expr) => {
        Case {
            group: stringify!($group),
            name: stringify!($name),
            needs: $needs,
            run: $group::$name::<F>,
        }
    };
}

pub(crate) fn all<F: Fixture>() -> Vec<Case<F>> {
    vec![
        case!(data::write_lands_at_remote_index, PLAIN),
        case!(data::read_lands_at_local_index, READ),
        case!(data::one_local_block_to_many_remote, PLAIN),
        case!(data::many_small_blocks_in_one_batch, PLAIN),
        case!(data::large_blocks_span_chunks, PLAIN),
        case!(data::read_large_batch, READ),
        case!(data::four_thousand_blocks_in_one_post, PLAIN),
        case!(runs::mixed_runs_land_exactly, PLAIN),
        case!(runs::run_longer_than_one_operation, PLAIN),
        case!(ids::unique_and_increasing_across_peers, PLAIN),
        case!(ids::each_reported_exactly_once, PLAIN),
        case!(ids::in_flight_counts, PLAIN),
        case!(validation::length_mismatch, PLAIN),
        case!(validation::empty_index_lists, PLAIN),
        case!(validation::local_index_out_of_range, PLAIN),
        case!(validation::remote_index_out_of_range_of_peer, PLAIN),
        case!(validation::remote_block_twice_in_write, PLAIN),
        case!(validation::local_block_twice_in_read, READ),
        case!(validation::unknown_peer, PLAIN),
        case!(validation::every_call_after_close, PLAIN),
        case!(peers::block_len_mismatch, PLAIN),
        case!(peers::different_fingerprints, PLAIN),
        case!(peers::empty_fingerprint_either_side, PLAIN),
        case!(peers::other_backend_descriptor, PLAIN),
        case!(peers::malformed_descriptor_bytes, PLAIN),
        case!(peers::malformed_backend_address, PLAIN),
        case!(peers::descriptor_disagreeing_with_registration, PLAIN),
        case!(polling::scoped_to_peer, PLAIN),
        case!(polling::none_drains_every_peer, PLAIN),
        case!(polling::unknown_peer_is_empty, PLAIN),
        case!(waiting::wakes_for_its_peer_only, PLAIN),
        case!(waiting::times_out_then_reports_the_end, FAULTS),
        case!(waiting::close_ends_the_wait, FAULTS),
        case!(cancel::immediate_forgets_ids, PLAIN),
        case!(cancel::wait_keeps_running_transfer, FAULTS),
        case!(cancel::wait_releases_finished_transfer, PLAIN),
        case!(cancel::wait_no_late_bytes, PLAIN),
        case!(cancel::wait_while_release_busy, FAULTS),
        case!(cancel::immediate_defers_release_of_running, FAULTS),
        case!(registration::remove_supersedes_in_flight, FAULTS),
        case!(registration::superseded_connect_gives_up, FAULTS),
        case!(registration::second_supersedes_first, FAULTS),
        case!(registration::remove_does_not_wait, FAULTS),
        case!(registration::handle_is_a_future, PLAIN),
        case!(registration::handle_wakes_its_task, FAULTS),
        case!(registration::invalid_descriptor_resolves_at_once, PLAIN),
        case!(registration::add_replaces_published_peer, PLAIN),
        case!(remove::transfers_in_flight_fail_as_removed, FAULTS),
        case!(remove::unknown_peer, PLAIN),
        case!(remove::then_add_again, PLAIN),
        case!(remove::completed_before_remove_is_done, PLAIN),
        case!(failures::failing_state_check_is_terminal, FAULTS),
        case!(failures::remote_disconnect_fails_in_bounded_time, FAULTS),
        case!(failures::stalled_peer_is_cut, FAULTS),
        case!(failures::finished_unpolled_peer_is_not_cut, FAULTS),
        case!(
            failures::finished_behind_a_busy_state_check_is_not_cut,
            FAULTS
        ),
        case!(failures::uncut_stall_is_looked_at_for_certain_once, FAULTS),
        case!(failures::remote_close_fails_transfers, DISCONNECT),
        case!(failures::failed_submit_leaves_nothing_tracked, FAULTS),
        case!(deferred::held_post_does_not_hold_the_caller, FAULTS),
        case!(deferred::failed_post_surfaces_as_failed, FAULTS),
        case!(deferred::cancel_of_queued_never_posts, FAULTS),
        case!(deferred::forgotten_inside_its_post_stays_live, FAULTS),
        case!(deferred::remove_fails_queued_unposted, FAULTS),
        case!(deferred::close_never_posts_queued, FAULTS),
        case!(deferred::queued_ids_reported_once, FAULTS),
        case!(deferred::ended_inside_its_post_wakes_the_waiter, FAULTS),
        case!(peer_fault::reported_until_removed, FAULTS),
        case!(peer_fault::consecutive_failures, FAULTS),
        case!(close::idempotent, PLAIN),
        case!(close::with_transfers_in_flight, PLAIN),
        case!(close::waits_for_running_transfer, FAULTS),
        case!(close::forced_close_frees_only_after_transfers_stop, FAULTS),
        case!(close::resolves_pending_registrations, FAULTS),
        case!(close::stops_a_waiting_connect, FAULTS),
        case!(close::drop_closes, FAULTS),
        case!(target::write_after_close, REVOKE),
        case!(target::read_after_close, READ_REVOKE),
        case!(target::close_during_long_transfers, REVOKE),
        case!(target::dropped_before_and_during_transfers, PLAIN),
        case!(concurrency::threads_per_peer_with_churn, PLAIN),
        case!(notifications::names_are_unique_and_described, PLAIN),
        case!(notifications::write_notification_follows_the_data, NOTIFY),
        case!(
            notifications::read_notification_reaches_the_producer,
            NOTIFY_READ
        ),
        case!(notifications::standalone_notifications_arrive_once, NOTIFY),
        case!(notifications::drained_per_sender, NOTIFY),
        case!(notifications::bad_input_sends_nothing, NOTIFY),
        case!(notifications::failed_transfer_sends_none, NOTIFY_FAULTS),
        case!(notifications::cancelled_transfer_sends_none, NOTIFY_FAULTS),
        case!(notifications::removed_peer_gets_none, NOTIFY_FAULTS),
        case!(notifications::undelivered_notification_fails, NOTIFY_FAULTS),
        case!(notifications::closed_target_discards_and_refuses, NOTIFY),
        case!(notifications::full_inbox_counts_drops, NOTIFY),
        case!(telemetry::records_and_counters, PLAIN),
    ]
}

/// The contract table (the rustdoc of `blockwire::Transport`) and the cases' citations of it
/// agree: every id a case cites is a rule, every rule is cited, every case cites one.
#[cfg(test)]
mod rules {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The source of the table.
    const CONTRACT: &str = include_str!("../../../crates/blockwire/src/transport.rs");
    /// The list of cases.
    const CASES: &str = include_str!("mod.rs");

    /// The ids of the table's rows (`/// | \`R-...\` | call | rule |`), in order.
    fn defined() -> Vec<String> {
        CONTRACT
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("/// | `"))
            .filter_map(|row| row.split_once('`'))
            .map(|(id, _)| id.to_string())
            .filter(|id| id.starts_with("R-"))
            .collect()
    }

    /// The rules each case function (`group::name`) cites on its `/// Rules: ...` line.
    fn cited() -> BTreeMap<String, Vec<String>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cases");
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).expect("the cases' folder") {
            let path = entry.expect("a folder entry").path();
            let Some(group) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if group == "mod" || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a case file");
            let mut rules: Vec<String> = Vec::new();
            for line in text.lines() {
                if let Some(list) = line.strip_prefix("/// Rules:") {
                    rules.extend(
                        list.trim()
                            .trim_end_matches('.')
                            .split(',')
                            .map(|id| id.trim().to_string()),
                    );
                } else if let Some(rest) = line.strip_prefix("pub(crate) fn ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(format!("{group}::{name}"), std::mem::take(&mut rules));
                } else if !line.starts_with("///") {
                    rules.clear();
                }
            }
        }
        out
    }

    /// The cases the suite runs (`case!(group::name, ...)` above).
    fn registered() -> Vec<String> {
        CASES
            .lines()
            .filter_map(|l| l.trim().strip_prefix("case!("))
            .filter_map(|l| l.split_once(','))
            .map(|(name, _)| name.trim().to_string())
            .collect()
    }

    #[test]
    fn the_table_has_rules_each_once() {
        let ids = defined();
        assert!(ids.len() >= 20, "the table parsed to {ids:?}");
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "an id twice in {ids:?}");
    }

    #[test]
    fn every_cited_id_is_a_rule_and_every_rule_is_cited() {
        let ids: BTreeSet<String> = defined().into_iter().collect();
        let cited = cited();
        let mut used = BTreeSet::new();
        for (case, rules) in &cited {
            for rule in rules {
                assert!(
                    ids.contains(rule),
                    "{case} cites {rule}, which the table of `Transport` does not have"
                );
                used.insert(rule.clone());
            }
        }
        let uncited: Vec<&String> = ids.difference(&used).collect();
        assert!(uncited.is_empty(), "no case cites {uncited:?}");
    }

    #[test]
    fn every_case_cites_a_rule() {
        let cited = cited();
        let cases = registered();
        assert!(cases.len() >= 60, "the list parsed to {cases:?}");
        for case in cases {
            let rules = cited
                .get(&case)
                .unwrap_or_else(|| panic!("{case} is run but not found in its group's file"));
            assert!(
                !rules.is_empty(),
                "{case} cites no rule (`/// Rules: R-...`)"
            );
        }
    }
}
