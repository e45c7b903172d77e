//! Building an [`Agent`]: every setting, its default, and the checks done once.

use std::path::PathBuf;
use std::sync::Arc;

use codeact_runtime::Runtime;

use super::{Agent, AgentError};
use crate::agent::approval::{Approvals, Approver};
use crate::agent::coach::{Coach, PlainCoach};
use crate::agent::decide::LoopConfig;
use crate::agent::events::{Event, Listener};
use crate::model::ModelClient;
use crate::output::spec::OutputSpec;
use crate::prompts::{Prompts, TransferTarget};
use crate::tools::discovery::{ToolDiscovery, discovery_tools};
use crate::tools::toolbox::ToolBox;

/// Builds an [`Agent`]; every setting has a default.
pub struct AgentBuilder {
    name: String,
    description: String,
    targets: Vec<TransferTarget>,
    model: Arc<dyn ModelClient>,
    runtime: Arc<dyn Runtime>,
    tools: Vec<crate::tools::toolbox::Tool>,
    tool_discovery: ToolDiscovery,
    policy: Option<codeact_rhai::RhaiPolicy>,
    approvals: Approvals,
    files: Option<crate::files::FileArea>,
    see_images: bool,
    cells: Option<crate::agent::CellLimits>,
    config: LoopConfig,
    coach: Arc<dyn Coach>,
    instructions: String,
    output: OutputSpec,
    working_dir: Option<PathBuf>,
    prompts: Prompts,
    max_tokens: u32,
    temperature: Option<f32>,
    stream: bool,
    listeners: Vec<Listener>,
}

impl AgentBuilder {
    /// The agent's name, in events and transcripts. Default: `main`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// What this agent does, for other agents' prompts. Default: empty.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// An agent a script may hand over to; the run ends on the transfer (a
    /// [`Team`](crate::agent::Team) then starts that agent). Default: none.
    pub fn transfer_target(mut self, target: TransferTarget) -> Self {
        self.targets.push(target);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: crate::tools::toolbox::Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// When the tools are searched from scripts (`search_tools`, `describe_tool`)
    /// rather than all listed in the prompt. Default: [`ToolDiscovery::default`]
    /// (past 40 tools or 12,000 bytes of signatures); [`ToolDiscovery::off`]
    /// always lists them.
    pub fn tool_discovery(mut self, discovery: ToolDiscovery) -> Self {
        self.tool_discovery = discovery;
        self
    }

    /// A policy put to what scripts do: its `check_call(tool, args)` runs before
    /// every tool call (a reason refuses the call: the script gets a catchable
    /// tool error carrying it), its `check_code(code, language)` before every
    /// script (a reason is fed back as the step's error, and the script does not
    /// run). It fails closed: a rule that throws or runs past its limits refuses.
    /// `"ask"` from `check_call` routes the call to the
    /// [`on_approval`](Self::on_approval) callback (refused without one), and
    /// from `check_code` refuses the script. Default: none.
    pub fn policy(mut self, policy: codeact_rhai::RhaiPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Marks `tool` as needing approval: each call waits inside the script for
    /// the [`on_approval`](Self::on_approval) callback, and runs only when it
    /// approves (denied, the call throws a catchable tool error saying why).
    /// Without a callback every such call is denied. Default: no tool is marked.
    pub fn needs_approval(mut self, tool: impl Into<String>) -> Self {
        self.approvals.mark(tool);
        self
    }

    /// Marks the calls for which `rule(tool, args)` is true as needing approval,
    /// e.g. a transfer above some amount.
    pub fn needs_approval_when(
        mut self,
        rule: impl Fn(&str, &serde_json::Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approvals.mark_when(Arc::new(rule));
        self
    }

    /// Who decides on the calls that need approval (marked ones, and those the
    /// policy answers `"ask"` for): see [`Approver`]. Default: none, so they are
    /// denied.
    pub fn on_approval(mut self, approver: Approver) -> Self {
        self.approvals.approver = Some(approver);
        self
    }

    /// Adds tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = crate::tools::toolbox::Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Extra instructions for this agent, added to the system prompt. Default: none.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// What this agent's final results must look like: the agent level of the
    /// cascade agent → stage → request (see [`OutputSpec`]). Its schema and
    /// validator are compiled by [`build`](Self::build). Default: empty.
    pub fn output(mut self, spec: OutputSpec) -> Self {
        self.output = spec;
        self
    }

    /// The directory artifact paths of a final result are relative to; a path
    /// escaping it gets the result refused. Default: the process's working
    /// directory when the run starts.
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Gives scripts the file helpers of `area` (`read_text`, `write_text`,
    /// `list_dir`, `exists`) and makes its root the working directory artifacts
    /// are looked up in. The area lives as long as the agent or a clone of it.
    /// Default: no files.
    pub fn files(mut self, area: &crate::files::FileArea) -> Self {
        self.files = Some(area.clone());
        self.tools(area.tools()).working_dir(area.root())
    }

    /// Lets scripts start cells: scripts of their own language that run on, each
    /// in a session of its own on a thread of its own, while the model thinks
    /// (`start_cell`, `poll_cell`, `wait_cell`, `cancel_cell`, and `notify`
    /// inside a cell; see [`CellLimits`](crate::CellLimits)). The functions join
    /// the agent's tools and the prompt says how to use them. Each cell runs
    /// under the runtime's limits and calls tools under the run's budgets,
    /// policy and approvals; cells end with their run. Default: off, so the
    /// tools and the prompt are as without it.
    pub fn cells(mut self, limits: crate::agent::CellLimits) -> Self {
        self.cells = Some(limits);
        self
    }

    /// Whether the model is sent the images scripts show (`show_image`) as
    /// pictures, with the step's feedback: for models that accept images
    /// (OpenAI's and Anthropic's formats). Otherwise each is described in a line
    /// of text (its path, type, size and digest). Default: false.
    pub fn see_images(mut self, see: bool) -> Self {
        self.see_images = see;
        self
    }

    /// The templates of what the host says to the model: the system prompt
    /// around the runtime's card and the feedback after each step, for a model
    /// that reads the default wording badly, or another language. Each
    /// replacement was checked when it was set ([`Prompts::set`]). Default:
    /// [`Prompts::default`], the templates under `prompts/`.
    pub fn prompts(mut self, prompts: Prompts) -> Self {
        self.prompts = prompts;
        self
    }

    /// The loop's rules. Default: [`LoopConfig::default`].
    pub fn config(mut self, config: LoopConfig) -> Self {
        self.config = config;
        self
    }

    /// The coach that advises the loop ([`coach`](crate::agent::coach)):
    /// [`SmallModelCoach`](crate::agent::coach::SmallModelCoach) for a small
    /// local model that needs its feedback spelled out. Default:
    /// [`PlainCoach`], which never refuses a result the output checks accept
    /// and never runs code the model did not send.
    pub fn coach(mut self, coach: impl Coach + 'static) -> Self {
        self.coach = Arc::new(coach);
        self
    }

    /// Like [`coach`](Self::coach), for a coach already shared (one
    /// [`coach::by_name`](crate::agent::coach::by_name) gave).
    pub fn shared_coach(mut self, coach: Arc<dyn Coach>) -> Self {
        self.coach = coach;
        self
    }

    /// Output token limit per reply. Default: 2,048.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sampling temperature. Default: none sent, so the server's default applies
    /// (set 0 for the most repeatable answers of a local model).
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Stream replies, reporting text as it arrives. Default: true.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Calls `listener` with every event of every run.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners
            .push(Arc::new(move |_agent: &str, event: &Event| listener(event)));
        self
    }

    /// Adds a shared listener (e.g. [`Transcript::listener`](crate::agent::Transcript::listener)).
    pub fn listener(mut self, listener: Listener) -> Self {
        self.listeners.push(listener);
        self
    }

    /// Checks the tools, loads the output spec (compiling its schema and
    /// validator) and renders the system prompt once.
    pub fn build(mut self) -> Result<Agent, AgentError> {
        for tool in self.tools.iter().filter(|tool| tool.needs_approval()) {
            self.approvals.mark(tool.spec().name.clone());
        }
        let mut tools = self.tools;
        if let Some(limits) = &self.cells {
            tools.extend(crate::agent::cells::cell_tools(
                self.runtime.info().language,
                limits,
            ));
        }
        let mut specs: Vec<_> = tools.iter().map(|tool| tool.spec().clone()).collect();
        crate::tools::toolbox::settle_namespaces(&mut specs);
        let listed_tools = if self.tool_discovery.applies(&specs, &*self.runtime) {
            let [search, describe] = discovery_tools(&specs, &*self.runtime);
            let listed = vec![search.spec().clone(), describe.spec().clone()];
            tools.extend([search, describe]);
            Some(listed)
        } else {
            None
        };
        // The agent's tool layer (`HostTools`) asks its approver before a call
        // reaches the toolbox; a refused call names parameters as the runtime's
        // scripts write them.
        let tools = ToolBox::new(tools)
            .map_err(|e| AgentError::Setup(e.to_string()))?
            .approved_upstream()
            .written_as(self.runtime.spelling());
        let contract = self.output.load()?;
        let mut agent = Agent {
            name: self.name,
            description: self.description,
            instructions: self.instructions,
            targets: self.targets,
            model: self.model,
            runtime: self.runtime,
            tools: Arc::new(tools),
            listed_tools,
            policy: self.policy.map(Arc::new),
            approvals: Arc::new(self.approvals),
            files: self.files,
            see_images: self.see_images,
            cells: self.cells,
            config: self.config,
            coach: self.coach,
            output: self.output,
            contract,
            working_dir: self.working_dir,
            system_prompt: String::new(),
            prompts: self.prompts,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stream: self.stream,
            listeners: self.listeners,
        };
        agent.system_prompt = agent.render_prompt(&agent.targets, &agent.output)?;
        Ok(agent)
    }
}

impl Agent {
    /// Starts building an agent around `model` and `runtime`.
    pub fn builder(model: Arc<dyn ModelClient>, runtime: Arc<dyn Runtime>) -> AgentBuilder {
        AgentBuilder {
            name: "main".into(),
            description: String::new(),
            targets: Vec::new(),
            model,
            runtime,
            tools: Vec::new(),
            tool_discovery: ToolDiscovery::default(),
            policy: None,
            approvals: Approvals::default(),
            files: None,
            see_images: false,
            cells: None,
            config: LoopConfig::default(),
            coach: Arc::new(PlainCoach),
            instructions: String::new(),
            output: OutputSpec::default(),
            working_dir: None,
            prompts: Prompts::default(),
            max_tokens: 2_048,
            temperature: None,
            stream: true,
            listeners: Vec::new(),
        }
    }
}
