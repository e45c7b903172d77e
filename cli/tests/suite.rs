//! Most of the integration tests, in one binary: each was its own and linked
//! wasmtime, Boa and reqwest again. One module per former binary, named as it was
//! (`cargo test --test suite containment::` runs the containment attacks). The
//! fixture corpus, the load probe, the running-script slots and the real-model test
//! keep their own processes: they measure or cap the process itself, or run apart.

/// As the `codeact` binary: Rhai runs are held to their memory limit by what they
/// allocate, not only by what their variables hold.
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

mod support;

#[path = "suite/adversarial.rs"]
mod adversarial;
#[path = "suite/approvals.rs"]
mod approvals;
#[path = "suite/bench.rs"]
mod bench;
#[path = "suite/cells.rs"]
mod cells;
#[path = "suite/chats.rs"]
mod chats;
#[path = "suite/cli.rs"]
mod cli;
#[path = "suite/competent_replies.rs"]
mod competent_replies;
#[path = "suite/containment.rs"]
mod containment;
#[path = "suite/files.rs"]
mod files;
#[path = "suite/interrupts.rs"]
mod interrupts;
#[path = "suite/mcp.rs"]
mod mcp;
#[path = "suite/model_servers.rs"]
mod model_servers;
#[path = "suite/output_specs.rs"]
mod output_specs;
#[path = "suite/parallel_calls.rs"]
mod parallel_calls;
#[path = "suite/prompts.rs"]
mod prompts;
#[path = "suite/resume.rs"]
mod resume;
#[path = "suite/teams.rs"]
mod teams;
#[path = "suite/transcripts.rs"]
mod transcripts;
