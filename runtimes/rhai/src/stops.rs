//! How a run is stopped from inside the engine: the values `on_progress`
//! terminates a run with, and the stop after a wait on tools that took the run
//! past its deadline.

use rhai::{Dynamic, EvalAltResult, NativeCallContext};

use crate::run_state;

/// The value `on_progress` terminates a run with when its deadline passes.
pub(crate) const DEADLINE_TOKEN: &str = "codeact:deadline";

/// The value `on_progress` terminates a run with when it allocated past its budget.
pub(crate) const ALLOCATION_TOKEN: &str = "codeact:allocation";

/// Ends the run as at its deadline when a wait on tools took it there: a call
/// cut short by the run's total time answers with an error the script could
/// otherwise catch and carry on past its limit.
pub(crate) fn out_of_time(ctx: &NativeCallContext) -> Result<(), Box<EvalAltResult>> {
    if run_state::deadline_passed() {
        return Err(Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::from(DEADLINE_TOKEN),
            ctx.call_position(),
        )));
    }
    Ok(())
}
