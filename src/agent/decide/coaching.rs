//! What the built-in coaching rules keep between the steps of a run: apart
//! from the loop's own state, so the loop reads as the loop. What must survive
//! a resume (holds, proposed rewrites) is also in the run's events, which a
//! resumed run replays ([`Progress`](super::Progress)).

use super::ProposedMend;
use serde_json::Value;

use crate::agent::units;

/// The built-in rules' working state.
#[derive(Debug, Clone, Default)]
pub(super) struct Coaching {
    /// The tools the script of the step in progress defines for itself.
    pub(super) faked_tools: Vec<String>,
    /// For the step in progress, what the Python stubs taken out made of
    /// the files they opened, written over the host's tools
    /// (`feedback/stub_reading`): said if the script fails.
    pub(super) stub_sections: Vec<String>,
    /// Those readings themselves (`json.loads(read_file(name="a.json"))`).
    pub(super) stub_readings: Vec<String>,
    /// For each stub kept as its reading in the step in progress, the
    /// script that observes that reading in a later script, the stub being
    /// gone by then: its imports, then `observation(...)` of the reading over
    /// the host's tool given the stub's defaults
    /// (`observation(list(csv.DictReader(read_file(name="sales.csv").splitlines())))`),
    /// or of the tool's call alone when the reading has no defaults to give.
    pub(super) kept_reading_observations: Vec<String>,
    /// The rewrite of the failed script that the last feedback proposed (or
    /// that the last step ran as, without failing), if any: the next reply,
    /// when it is that same script again, runs as the rewrite ([`ProposedMend`]).
    pub(super) proposed_mend: Option<ProposedMend>,
    /// The mend the script in progress ran as, or took a line of while
    /// changing others (`notes/changed_beside_mend`): proposed again if that
    /// script does not fail, so the same script sent once more runs the same
    /// way (and the same value shown twice gets `hints/same_observation`),
    /// and the failed script sent again, as the note invites, runs mended.
    pub(super) applied_mend: Option<ProposedMend>,
    /// The first line mend proposed since the last observation that showed no
    /// change beside a mend: a later mend, proposed for a script that
    /// already carried such a change, is compared with it too.
    pub(super) first_mend: Option<ProposedMend>,
    /// For the script in progress, when it took the line its feedback
    /// proposed and changed other lines of the failed script too, the note
    /// that shows them (`notes/changed_beside_mend`): said with its
    /// observation.
    pub(super) changed_beside_mend: Option<String>,
    /// For the script in progress, when it took part of the rewrite its
    /// feedback proposed but left out or changed up to
    /// [`CHANGES_BESIDE_MEND`] of its lines: the note that shows them
    /// (`notes/left_out_of_mend`) and the rewrite, said and proposed again
    /// (for this script) if the script fails.
    pub(super) left_out_of_mend: Option<(String, ProposedMend)>,
    /// Numbers the run's tools returned (at most [`holds::NUMBERS_KEPT`]), for a final
    /// result that is one of them in another unit than the task asks for.
    pub(super) numbers_seen: Vec<units::NumberSeen>,
    /// The run's tool results that are ids (an integer, or a list of at most
    /// [`holds::IDS_LISTED`]), by tool, at most [`holds::NUMBERS_KEPT`].
    pub(super) ids_seen: Vec<(String, Value)>,
    /// The maps the run's tools returned (results, and items of listed
    /// results), at most [`holds::RECORDS_KEPT`] of at most
    /// [`holds::RECORD_BYTES`] each.
    pub(super) records_seen: Vec<Value>,
    /// Sections for the feedback of the step in progress that go last, just
    /// before "Fix the script", where a small model acts on them.
    pub(super) closing_sections: Vec<String>,
}
