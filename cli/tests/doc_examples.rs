//! The shell examples of the README and the manual (`docs/*.md`), run against the
//! built `codeact` binary, so the documented commands cannot drift from it.
//!
//! An example is tested when the line `<!-- tested -->` stands right above its
//! ```` ```sh ```` block (blank lines between are allowed). The block runs as one
//! `bash -euo pipefail` script in the repository's root, with the binary's
//! directory first on `PATH`, and must exit 0. When a ```` ```text ```` block
//! follows it (again only blank lines between), that block is the script's whole
//! stdout, compared with trailing whitespace trimmed. Only examples that need nothing
//! outside the repository (and `python3`, which the tests need anyway) are marked.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The marker above a tested block.
const MARKER: &str = "<!-- tested -->";
/// How long one example may take before it counts as hung.
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(120);

/// One tested example: where it is, what it runs, what it must print.
#[derive(Debug, PartialEq)]
struct Example {
    file: String,
    line: usize,
    script: String,
    expected_stdout: Option<String>,
}

/// The fenced block starting at `lines[start]` (its opening fence): its info string,
/// its body, and the index of the line after its closing fence.
fn fenced_block(lines: &[&str], start: usize) -> Option<(String, String, usize)> {
    let info = lines[start].trim().strip_prefix("```")?.trim().to_string();
    let mut body = String::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if line.trim_start().starts_with("```") {
            return Some((info, body, i + 1));
        }
        body.push_str(line);
        body.push('\n');
    }
    None
}

/// The index of the first line at or after `from` that is not blank.
fn next_nonblank(lines: &[&str], from: usize) -> Option<usize> {
    (from..lines.len()).find(|&i| !lines[i].trim().is_empty())
}

/// The tested examples of one Markdown file, or why a marker is misplaced.
fn tested_examples(file: &str, text: &str) -> Result<Vec<Example>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut examples = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != MARKER {
            continue;
        }
        let at = format!("{file}:{}", i + 1);
        let start = next_nonblank(&lines, i + 1)
            .ok_or_else(|| format!("{at}: {MARKER} with nothing under it"))?;
        let (info, script, after) = fenced_block(&lines, start)
            .ok_or_else(|| format!("{at}: {MARKER} is not followed by a closed fenced block"))?;
        if info != "sh" {
            return Err(format!(
                "{at}: {MARKER} must stand above a ```sh block, not ```{info}"
            ));
        }
        let expected_stdout = match next_nonblank(&lines, after) {
            Some(next) if lines[next].trim() == "```text" => {
                let (_, expected, _) = fenced_block(&lines, next)
                    .ok_or_else(|| format!("{at}: the expected output block is not closed"))?;
                Some(expected)
            }
            _ => None,
        };
        examples.push(Example {
            file: file.to_string(),
            line: start + 1,
            script,
            expected_stdout,
        });
    }
    Ok(examples)
}

/// The repository's root: the nearest folder at or above this package's that holds
/// README.md and docs/ (this test works the same from a package in a subfolder).
fn repository_root() -> PathBuf {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    package
        .ancestors()
        .find(|dir| dir.join("README.md").is_file() && dir.join("docs").is_dir())
        .unwrap_or_else(|| panic!("no README.md and docs/ at or above {}", package.display()))
        .to_path_buf()
}

/// README.md and every Markdown page under docs/, sorted.
fn documentation_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// Runs `script` with the binary on PATH; its exit status, stdout and stderr.
fn run_example(script: &str, root: &Path) -> (Option<i32>, String, String) {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_codeact"));
    let bin_dir = binary.parent().expect("the binary's directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .expect("a PATH");
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(root)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the example") {
            break status;
        }
        if started.elapsed() > EXAMPLE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the example ran past {EXAMPLE_TIMEOUT:?}:\n{script}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("stdout reader").expect("stdout is UTF-8");
    let stderr = err.join().expect("stderr reader").expect("stderr is UTF-8");
    (status.code(), stdout, stderr)
}

#[test]
fn every_tested_shell_example_in_the_readme_and_the_manual_runs_and_prints_what_it_shows() {
    let root = repository_root();
    let mut examples = Vec::new();
    for path in documentation_files(&root) {
        let text = std::fs::read_to_string(&path).expect("a readable page");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        examples.extend(tested_examples(&name, &text).unwrap_or_else(|e| panic!("{e}")));
    }
    assert!(
        examples.iter().any(|e| e.file == "README.md"),
        "the README has a tested example"
    );
    let mut failures = Vec::new();
    for example in &examples {
        let (code, stdout, stderr) = run_example(&example.script, &root);
        let at = format!("{}:{}", example.file, example.line);
        if code != Some(0) {
            failures.push(format!(
                "{at}: exit status {code:?}\n{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                example.script
            ));
            continue;
        }
        if let Some(expected) = &example.expected_stdout
            && stdout.trim_end() != expected.trim_end()
        {
            failures.push(format!(
                "{at}: stdout differs from the page\n{}\npage:\n{expected}\nprinted:\n{stdout}\nstderr:\n{stderr}",
                example.script
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples failed:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_marked_block_and_the_output_block_under_it_are_read_as_one_example() {
    let page = "text\n<!-- tested -->\n\n```sh\necho hi\n```\n\n```text\nhi\n```\n";
    assert_eq!(
        tested_examples("page.md", page),
        Ok(vec![Example {
            file: "page.md".into(),
            line: 4,
            script: "echo hi\n".into(),
            expected_stdout: Some("hi\n".into()),
        }])
    );
}

#[test]
fn an_unmarked_block_is_not_run_and_a_marked_one_without_output_checks_only_its_status() {
    let page =
        "```sh\nrm -rf /nowhere\n```\n<!-- tested -->\n```sh\ntrue\n```\nprose\n```text\nx\n```\n";
    let examples = tested_examples("page.md", page).expect("a well-formed page");
    assert_eq!(examples.len(), 1);
    assert_eq!(examples[0].script, "true\n");
    assert_eq!(examples[0].expected_stdout, None);
}

#[test]
fn a_misplaced_marker_is_an_error_naming_its_line() {
    let over_rust = "<!-- tested -->\n```rust\nfn main() {}\n```\n";
    let err = tested_examples("page.md", over_rust).expect_err("a marker over a Rust block");
    assert!(err.contains("page.md:1") && err.contains("```sh"), "{err}");
    let unclosed = "<!-- tested -->\n```sh\necho never closed\n";
    let err = tested_examples("page.md", unclosed).expect_err("a marker over an unclosed block");
    assert!(
        err.contains("not followed by a closed fenced block"),
        "{err}"
    );
    let at_the_end = "prose\n<!-- tested -->\n\n";
    let err = tested_examples("page.md", at_the_end).expect_err("a marker with nothing under it");
    assert!(err.contains("nothing under it"), "{err}");
}
