//! The cases, by group. Each is a generic function over a [`Fixture`] that fails by panicking.

mod cancel;
mod close;
mod concurrency;
mod data;
mod failures;
mod ids;
mod peer_fault;
mod peers;
mod polling;
mod registration;
mod remove;
mod target;
mod validation;

use crate::{Case, Fixture, Needs};

const PLAIN: Needs = Needs {
    faults: false,
    read: false,
    disconnect: false,
    revoke: false,
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
        case!(cancel::immediate_forgets_ids, PLAIN),
        case!(cancel::wait_keeps_running_transfer, FAULTS),
        case!(cancel::wait_releases_finished_transfer, PLAIN),
        case!(cancel::wait_no_late_bytes, PLAIN),
        case!(cancel::wait_while_release_busy, FAULTS),
        case!(cancel::immediate_defers_release_of_running, FAULTS),
        case!(registration::remove_supersedes_in_flight, FAULTS),
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
        case!(failures::remote_close_fails_transfers, DISCONNECT),
        case!(failures::failed_submit_leaves_nothing_tracked, FAULTS),
        case!(peer_fault::reported_until_removed, FAULTS),
        case!(peer_fault::consecutive_failures, FAULTS),
        case!(close::idempotent, PLAIN),
        case!(close::with_transfers_in_flight, PLAIN),
        case!(close::waits_for_running_transfer, FAULTS),
        case!(close::forced_close_frees_only_after_transfers_stop, FAULTS),
        case!(close::resolves_pending_registrations, FAULTS),
        case!(close::drop_closes, FAULTS),
        case!(target::write_after_close, REVOKE),
        case!(target::read_after_close, READ_REVOKE),
        case!(target::close_during_long_transfers, REVOKE),
        case!(target::dropped_before_and_during_transfers, PLAIN),
        case!(concurrency::threads_per_peer_with_churn, PLAIN),
    ]
}
