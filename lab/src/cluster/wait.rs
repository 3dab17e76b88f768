//! Bounded waits: every wait of the lab names what it waited for and the last reason it was
//! not there yet, so a lab that does not come up says why. The loop is the tests' own
//! (`kube_ovn_testkit::wait_for`).

pub use kube_ovn_testkit::wait::{Timeout, wait_for};

/// A check's answer from what is still missing: done when nothing is, else which are not yet.
pub fn nothing_missing(missing: &[String]) -> Result<bool, String> {
    if missing.is_empty() {
        Ok(true)
    } else {
        Err(format!("not yet: {}", missing.join(", ")))
    }
}
