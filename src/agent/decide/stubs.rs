//! Python stubs of the host's tools: taken out of a script before it runs, and
//! what the feedback offers in their place.

use minijinja::context;

use super::Conversation;
use crate::agent::{feedback, file_stubs, script_notes};

impl Conversation {
    /// `code` (Python) without its stubs of the host's tools or helpers and the imports
    /// only they used, their lines left blank, with a note for each stub
    /// (`notes/stub_removed`); and the lines to put in their place once the
    /// script is checked for redefined names, by index: a one-line
    /// definition that makes the same of the tool's text as a stub made of
    /// the file it opened, or that calls the tool with a stub's defaults, and
    /// the imports such a line uses.
    pub(super) fn take_out_python_stubs(&mut self, code: String) -> (String, Vec<(usize, String)>) {
        let helpers = script_notes::HELPERS.len();
        let mut put_back: Vec<(usize, String)> = Vec::new();
        let tools: Vec<&str> = self.provided_names[helpers..]
            .iter()
            .map(String::as_str)
            .collect();
        // The result helpers go too: a small model's first script wrote `def
        // final_result(product_name, ["out/report.md"]):`, copying the card's
        // line into a parameter list, and the SyntaxError it raised came back
        // four times while the rest of the script never ran. Not `call_tool`
        // (nor `transfer_to_agent`): a script's own `call_tool` fakes every
        // tool, and stays for the faked-tool checks to see.
        let names: Vec<&str> = ["observation", "final_result", "error"]
            .into_iter()
            .chain(tools.iter().copied())
            .collect();
        let stubs = script_notes::without_python_defs(&code, &names);
        let mut defaults_of: Vec<(&str, String)> = Vec::new();
        let mut kept_readings: Vec<&str> = Vec::new();
        // Each kept stub's reading over the host's tool with its defaults,
        // when it has them: what a later script writes for it.
        let mut readings_in_place: Vec<(&str, String)> = Vec::new();
        // The readings to suggest for stubs not kept, by tool: said if the
        // script fails (`feedback/stub_reading`).
        let mut suggested_readings: Vec<(&str, String)> = Vec::new();
        let mut dropped_imports = stubs.imports.clone();
        for (line, name, header) in &stubs.headers {
            let Some(tool) = tools.iter().position(|tool| tool == name) else {
                continue;
            };
            // A stub that read a file stays as what it made of the file,
            // read through the tool; else its defaults stay.
            let with_reading = self
                .stub_reading(&code, name, true)
                .and_then(|reading| script_notes::stub_with_reading(header, name, &reading));
            if let Some(shim) = with_reading {
                dropped_imports.retain(|(_, import)| !script_notes::uses_import(import, &shim));
                put_back.push((*line, shim));
                kept_readings.push(name);
                // The reading over the tool given the stub's defaults, with
                // the imports it uses: a later script has the host's tool
                // back, not this definition. Else the tool's call alone.
                let parameters = script_notes::signature_parameters(&self.tool_signatures[tool]);
                let defaults = script_notes::stub_with_defaults(header, name, &parameters)
                    .map(|(_, defaults)| defaults);
                // Without defaults the reading would name the stub's own
                // parameter, undefined in a later script.
                let reading = defaults
                    .as_ref()
                    .and_then(|_| self.stub_reading(&code, name, false));
                if let Some(reading) = &reading {
                    readings_in_place.push((name.as_str(), reading.clone()));
                }
                let observed = match reading {
                    Some(reading) => {
                        let imports: Vec<&str> = stubs
                            .imports
                            .iter()
                            .filter(|(_, import)| script_notes::uses_import(import, &reading))
                            .map(|(_, import)| import.trim())
                            .collect();
                        Some(
                            imports
                                .into_iter()
                                .map(String::from)
                                .chain([format!("observation({reading})")])
                                .collect::<Vec<_>>()
                                .join("\n"),
                        )
                    }
                    None => defaults.map(|defaults| format!("observation({name}({defaults}))")),
                };
                self.coaching.kept_reading_observations.extend(observed);
                continue;
            }
            // The imports the reading to suggest uses stay too.
            if let Some(reading) = self.stub_reading(&code, name, false) {
                dropped_imports.retain(|(_, import)| !script_notes::uses_import(import, &reading));
                suggested_readings.push((name.as_str(), reading));
            }
            let parameters = script_notes::signature_parameters(&self.tool_signatures[tool]);
            if let Some((shim, defaults)) =
                script_notes::stub_with_defaults(header, name, &parameters)
            {
                put_back.push((*line, shim));
                if !defaults_of.iter().any(|(of, _)| of == name) {
                    defaults_of.push((name, defaults));
                }
            }
        }
        // The imports a kept reading uses stay where they were.
        for (index, import) in &stubs.imports {
            if !dropped_imports.iter().any(|(dropped, _)| dropped == index) {
                put_back.push((*index, import.clone()));
            }
        }
        let dropped: Vec<&str> = dropped_imports
            .iter()
            .map(|(_, line)| line.as_str())
            .collect();
        for (index, name) in stubs.removed.iter().enumerate() {
            // The imports only the stubs used are said once, with the first.
            let imports = if index == 0 { &dropped[..] } else { &[] };
            let defaults = defaults_of
                .iter()
                .find(|(of, _)| of == name)
                .map(|(_, defaults)| defaults.as_str());
            let kept_reading = kept_readings.contains(&name.as_str());
            let note = self.prompts.render(
                "notes/stub_removed",
                context! {
                    name => name,
                    imports => imports,
                    defaults => defaults,
                    kept_reading => kept_reading,
                },
            );
            self.pending_notes.push(note);
            if kept_reading {
                // What to pass a function the script never called: the stub's
                // reading over the host's tool, when its defaults name the
                // file. Not the stub itself (`read_file()`): a small model sent
                // the call alone, where the stub is gone and the host's tool
                // wants its name.
                if stubs.headers.iter().any(|(_, of, header)| {
                    of == name && script_notes::all_parameters_defaulted(header, name)
                }) {
                    let in_place = readings_in_place
                        .iter()
                        .find(|(of, _)| of == name)
                        .map_or_else(|| format!("{name}()"), |(_, reading)| reading.clone());
                    self.coaching.stub_readings.push(in_place);
                }
                continue;
            }
            // Said just before "Fix the script" if the script fails:
            // placed with the note above the error, it went unread.
            if let Some((_, reading)) = suggested_readings.iter().find(|(of, _)| of == name) {
                let reading = reading.clone();
                let fenced = feedback::fenced(&reading, self.config.feedback_limit);
                let section = self.prompts.render(
                    "feedback/stub_reading",
                    context! { name => name, reading => fenced },
                );
                self.coaching.stub_sections.push(section);
                self.coaching.stub_readings.push(reading);
            }
        }
        if stubs.removed.is_empty() {
            return (code, Vec::new());
        }
        (stubs.code, put_back)
    }

    /// The last line to write for a script that only defined functions, when
    /// it defined one: `final_result(f())` for one without parameters, or
    /// `final_result(f(reading))` for one of one parameter when a stub of a
    /// tool read a file (its reading, see [`file_stubs`]). Model code, so
    /// quoted only fenced.
    pub(super) fn call_of_uncalled(&self, script: &str, uncalled: &[String]) -> Option<String> {
        let [name] = uncalled else { return None };
        let parameters = script_notes::parameter_count(script, name)?;
        match (parameters, self.coaching.stub_readings.as_slice()) {
            (0, _) => Some(format!("final_result({name}())")),
            (1, [reading]) => Some(format!("final_result({name}({reading}))")),
            _ => None,
        }
    }

    /// For a script that defined no function of its own but kept a stub's
    /// reading with defaults (`def read_file(name="sales.csv")`, a
    /// `final_result` stub taken out), the script that looks at what that
    /// reading gives, written over the host's tool with the stub's defaults
    /// (`import csv` and
    /// `observation(list(csv.DictReader(read_file(name="sales.csv").splitlines())))`:
    /// the next script has the host's tool back, not the stub, and
    /// `read_file()` failed for want of a name, in one run), fenced like every
    /// line the host hands the model to write. Offered the tool's call alone,
    /// the model read the file's raw text where the feedback said "what your
    /// reading of the file gives". A small model, told only that nothing ran,
    /// echoed the error text until its errors ran out; given the line in the
    /// host's words it sent its script back unchanged; given it fenced, it
    /// replied with the fenced line, markers and all, which now runs
    /// ([`extract::without_fence_markers`]).
    pub(super) fn observation_of_kept_reading(&self, uncalled: &[String]) -> Option<String> {
        if !uncalled.is_empty() {
            return None;
        }
        match self.coaching.kept_reading_observations.as_slice() {
            [script] => Some(feedback::fenced(script, self.config.feedback_limit)),
            _ => None,
        }
    }

    /// For a Python stub of the tool `name` in `code` that opened a file and
    /// returned what it made of it, that reading over the tool's text (see
    /// [`file_stubs`]), the tool given the stub's default (or, with
    /// `pass_parameter`, its parameter): only for a tool whose description
    /// says it gives text.
    pub(super) fn stub_reading(
        &self,
        code: &str,
        name: &str,
        pass_parameter: bool,
    ) -> Option<String> {
        let gives_text = self.tool_descriptions.iter().any(|(tool, description)| {
            let description = description.to_lowercase();
            tool == name
                && ["text", "string", "content"]
                    .iter()
                    .any(|w| description.contains(w))
        });
        if !gives_text {
            return None;
        }
        let signature = self.signature_of(name)?;
        if pass_parameter {
            file_stubs::reading_of_parameter(code, name, signature)
        } else {
            file_stubs::reading_in_place_of(code, name, signature)
        }
    }
}
