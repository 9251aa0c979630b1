//! The transaction coordinator's `__transaction_state` records (TransactionLogKey, TransactionLogValue v0-v1) and
//! the COMMIT/ABORT control batches the partition side parses (the first input byte picks the decoder). What
//! decodes must re-encode to bytes that decode equal, up to what the written version cannot carry.
#![no_main]
use annal_broker::txn::records::{self, TxnLogValue};
use annal_broker::txn::state::TxnState;
use annal_log::control;
use libfuzzer_sys::fuzz_target;

/// `v` as `records::value` writes it: version 1 (flexible, with the tagged fields) for a transaction-version-2
/// client, else version 0 (no tagged fields); no partitions in `Empty` either way.
fn as_written(v: &TxnLogValue) -> TxnLogValue {
    let mut v = v.clone();
    if v.client_transaction_version < 2 {
        v.previous_producer_id = -1;
        v.next_producer_id = -1;
        v.client_transaction_version = 0;
    }
    if v.state == TxnState::Empty {
        v.partitions.clear();
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Some(id) = records::parse_key(bytes) {
                assert_eq!(records::parse_key(&records::key(&id)), Some(id));
            }
        }
        1 => {
            let Some(v) = records::parse_value(bytes) else {
                return;
            };
            // Strings longer than an i16 length cannot be written (a v1 value's compact strings can claim more).
            if v.partitions.iter().any(|(t, _)| t.len() > i16::MAX as usize) {
                return;
            }
            let again = records::parse_value(&records::value(&v));
            assert_eq!(
                again,
                Some(as_written(&v)),
                "transaction log value changed through encode + decode"
            );
        }
        _ => {
            if let Ok(Some(marker)) = control::parse_marker(bytes) {
                let rebuilt = control::build_marker_batch(1, 0, marker, 0);
                assert_eq!(control::parse_marker(&rebuilt), Ok(Some(marker)));
            }
        }
    }
});
