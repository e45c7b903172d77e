//! The file helpers as tools, the same in every runtime.

use std::path::Path;

use codeact_runtime::ToolError;
use serde_json::{Value, json};

use super::FileArea;
use super::beneath::{self, DiskBudget, FileError};
use crate::tools::toolbox::Tool;

/// `read_text(path)`: a file's text.
pub const READ_TEXT_TOOL: &str = "read_text";
/// `write_text(path, text)`: writes a file, making folders on the way.
pub const WRITE_TEXT_TOOL: &str = "write_text";
/// `write_bytes(path, base64)`: writes a binary file (a PNG a script drew) from
/// its bytes in base64.
pub const WRITE_BYTES_TOOL: &str = "write_bytes";
/// `list_dir(path)`: the names in a folder.
pub const LIST_DIR_TOOL: &str = "list_dir";
/// `exists(path)`: whether a path exists.
pub const EXISTS_TOOL: &str = "exists";
/// `show_image(path)`: shows an image file to the model with the step's result.
pub const SHOW_IMAGE_TOOL: &str = "show_image";

pub(super) fn file_tools(area: &FileArea) -> Vec<Tool> {
    let layout = area.layout();
    let path_only = |what: &str| {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": what}
        }, "required": ["path"]})
    };
    let read = {
        let area = area.clone();
        Tool::from_fn(
            READ_TEXT_TOOL,
            format!(
                "Returns the text of a file (UTF-8, at most {}). {layout}",
                human_bytes(area.inner.max_file_bytes)
            ),
            move |args| area.read_text(path_arg(&args)?),
        )
        .with_parameters(path_only("the file, e.g. data/input.csv"))
        .with_returns(json!({"type": "string"}))
    };
    let write = {
        let area = area.clone();
        Tool::from_fn(
            WRITE_TEXT_TOOL,
            format!(
                "Writes text to a file, replacing it, and makes missing folders. {layout} The run may write {} in all.",
                human_bytes(area.inner.disk.max())
            ),
            move |args| {
                let text = match args.get("text") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => return Err(ToolError::new("write_text needs `text`, the file's new content")),
                };
                area.write_text(path_arg(&args)?, &text)
            },
        )
        .with_parameters(json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "the file, e.g. out/report.md"},
            "text": {"type": "string", "description": "the whole new content"}
        }, "required": ["path", "text"]}))
        .with_returns(json!({"type": "object", "properties": {
            "path": {"type": "string"}, "bytes": {"type": "integer"}}}))
    };
    let write_bytes = {
        let area = area.clone();
        Tool::from_fn(
            WRITE_BYTES_TOOL,
            format!(
                "Writes a binary file (an image, say) from its bytes in base64, replacing it, and makes missing folders. {layout} The run may write {} in all.",
                human_bytes(area.inner.disk.max())
            ),
            move |args| {
                let Some(Value::String(encoded)) = args.get("base64") else {
                    return Err(ToolError::new(
                        "write_bytes needs `base64`, the file's bytes in base64 (a string)",
                    ));
                };
                let bytes = decode_base64(encoded)?;
                area.write_file(path_arg(&args)?, &bytes)
            },
        )
        .with_parameters(json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "the file, e.g. out/chart.png"},
            "base64": {"type": "string", "description": "the whole new content, in base64"}
        }, "required": ["path", "base64"]}))
        .with_returns(json!({"type": "object", "properties": {
            "path": {"type": "string"}, "bytes": {"type": "integer"}}}))
    };
    let list = {
        let area = area.clone();
        Tool::from_fn(
            LIST_DIR_TOOL,
            format!(
                "Returns the sorted names in a folder (\".\" is the working directory), a folder's name ending in /. {layout}"
            ),
            move |args| {
                let path = match args.get("path") {
                    None | Some(Value::Null) => ".",
                    Some(_) => path_arg(&args)?,
                };
                area.list_dir(path)
            },
        )
        .with_parameters(json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "the folder, e.g. data; the working directory when left out"}
        }}))
        .with_returns(json!({"type": "array", "items": {"type": "string"}}))
    };
    let exists = {
        let area = area.clone();
        Tool::from_fn(
            EXISTS_TOOL,
            format!("Returns true when a file or folder exists. {layout}"),
            move |args| area.exists(path_arg(&args)?),
        )
        .with_parameters(path_only("the file or folder"))
        .with_returns(json!({"type": "boolean"}))
    };
    let show = {
        let area = area.clone();
        Tool::from_fn(
            SHOW_IMAGE_TOOL,
            format!(
                "Shows you an image file (PNG, JPEG, GIF or WebP, at most {}{}) with this script's result. {layout}",
                human_bytes(super::MAX_IMAGE_BYTES),
                if cfg!(feature = "images") {
                    format!(
                        "; a larger picture is scaled down to {} pixels on its long side",
                        super::MAX_IMAGE_SIDE
                    )
                } else {
                    String::new()
                }
            ),
            move |args| area.show_image(path_arg(&args)?),
        )
        .with_parameters(path_only("the image, e.g. out/chart.png"))
        .with_returns(json!({"type": "object", "properties": {
            "shown": {"type": "string"}, "bytes": {"type": "integer"},
            "width": {"type": "integer"}, "height": {"type": "integer"}}}))
    };
    vec![read, write, write_bytes, list, exists, show]
}

/// Bytes from base64 (standard alphabet, padding optional, whitespace between
/// lines ignored), or an error saying where it stops being base64.
fn decode_base64(encoded: &str) -> Result<Vec<u8>, ToolError> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let compact: String = encoded
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    LENIENT
        .decode(compact.as_bytes())
        .map_err(|e| ToolError::new(format!("write_bytes: `base64` is not base64: {e}")))
}

/// The image type `bytes` start like, if any this host shows.
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// `bytes` as a person writes it: `4 MiB`, `64 KiB`, `1000 bytes`.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

fn path_arg(args: &Value) -> Result<&str, ToolError> {
    match args.get("path") {
        Some(Value::String(path)) => Ok(path),
        Some(other) => Err(ToolError::new(format!(
            "`path` must be a string, not {}",
            json_kind(other)
        ))),
        None => Err(ToolError::new(
            "`path` is missing: give the file's path, e.g. data/input.csv",
        )),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A failed file operation as the script sees it.
fn refused(path: &Path, error: FileError) -> ToolError {
    let path = if path.as_os_str().is_empty() {
        ".".to_string()
    } else {
        path.display().to_string()
    };
    ToolError::new(match error {
        FileError::NotFound => format!("'{path}' does not exist (list_dir shows what does)"),
        FileError::Escapes => {
            format!(
                "'{path}' leads out of the working directory (through a link); give a path inside it"
            )
        }
        FileError::IsALink => format!("'{path}' is a link; write to the file it names instead"),
        FileError::IsADirectory => format!("'{path}' is a folder, not a file"),
        FileError::NotADirectory => format!("'{path}' is not a folder"),
        FileError::NotARegularFile => {
            format!("'{path}' is not a regular file (a device, pipe or socket)")
        }
        FileError::TooBig { bytes, max } => {
            format!("'{path}' holds {bytes} bytes, more than the {max} a file may have")
        }
        FileError::DiskLimit {
            max,
            written,
            wanted,
        } => format!(
            "disk limit of {max} bytes exceeded: writing '{path}' needs {wanted} more and the run has written {written}; nothing was written"
        ),
        FileError::Other(why) => format!("'{path}': {why}"),
    })
}

impl FileArea {
    fn read_text(&self, path: &str) -> Result<Value, ToolError> {
        let at = self
            .resolve(path)
            .map_err(|why| ToolError::new(format!("'{path}' {why}")))?;
        let bytes = beneath::read(at.base, &at.rest, self.inner.max_file_bytes)
            .map_err(|e| refused(&at.shown, e))?;
        String::from_utf8(bytes).map(Value::String).map_err(|e| {
            ToolError::new(format!(
                "'{}' is not UTF-8 text (byte {} is not); read_text reads text files only",
                at.shown.display(),
                e.utf8_error().valid_up_to()
            ))
        })
    }

    fn write_text(&self, path: &str, text: &str) -> Result<Value, ToolError> {
        self.write_file(path, text.as_bytes())
    }

    /// Writes `bytes` to `path` beneath the area, within the file and disk caps.
    fn write_file(&self, path: &str, bytes: &[u8]) -> Result<Value, ToolError> {
        let at = self
            .resolve(path)
            .map_err(|why| ToolError::new(format!("'{path}' {why}")))?;
        if !at.writable {
            return Err(ToolError::new(format!(
                "'{}' is in a read-only mount; write under another folder, e.g. out/",
                at.shown.display()
            )));
        }
        let max_file = self.inner.max_file_bytes;
        if bytes.len() as u64 > max_file {
            return Err(refused(
                &at.shown,
                FileError::TooBig {
                    bytes: bytes.len() as u64,
                    max: max_file,
                },
            ));
        }
        let mut written = self.inner.disk.lock();
        let mut budget = DiskBudget {
            written: &mut written,
            max: self.inner.disk.max(),
        };
        beneath::write(at.base, &at.rest, bytes, &mut budget).map_err(|e| refused(&at.shown, e))?;
        Ok(json!({"path": at.shown.display().to_string(), "bytes": bytes.len()}))
    }

    fn list_dir(&self, path: &str) -> Result<Value, ToolError> {
        let at = self
            .resolve(path)
            .map_err(|why| ToolError::new(format!("'{path}' {why}")))?;
        let mut names = match beneath::list(at.base, &at.rest) {
            Ok(names) => names,
            // A folder that exists only because mounts lie beneath it.
            Err(FileError::NotFound) if self.holds_mounts(&at.shown) => Vec::new(),
            Err(e) => return Err(refused(&at.shown, e)),
        };
        for point in self.mount_points_in(&at.shown) {
            names.retain(|n| n.trim_end_matches('/') != point.trim_end_matches('/'));
            names.push(point);
        }
        names.sort();
        names.truncate(super::MAX_LISTED_NAMES);
        Ok(json!(names))
    }

    fn show_image(&self, path: &str) -> Result<Value, ToolError> {
        let at = self
            .resolve(path)
            .map_err(|why| ToolError::new(format!("'{path}' {why}")))?;
        let shown_path = at.shown.display().to_string();
        let data = beneath::read(at.base, &at.rest, super::MAX_IMAGE_BYTES)
            .map_err(|e| refused(&at.shown, e))?;
        let media_type = image_type(&data).ok_or_else(|| {
            ToolError::new(format!(
                "'{shown_path}' is not a PNG, JPEG, GIF or WebP image"
            ))
        })?;
        // Checked before decoding (no work for an image past the cap) and again
        // when the image is kept (another call may have shown one meanwhile).
        if self
            .inner
            .shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            >= super::MAX_IMAGES_PER_SCRIPT
        {
            return Err(ToolError::new(format!(
                "one script may show at most {} images",
                super::MAX_IMAGES_PER_SCRIPT
            )));
        }
        let fitted = super::images::fit_for_model(data, media_type)
            .map_err(|why| ToolError::new(format!("'{shown_path}' is not shown: {why}")))?;
        let mut answer = json!({"shown": shown_path, "bytes": fitted.data.len()});
        if let Some((width, height)) = fitted.size {
            answer["width"] = json!(width);
            answer["height"] = json!(height);
        }
        if let Some((width, height)) = fitted.scaled_from {
            answer["scaled_from"] = json!([width, height]);
        }
        let mut shown = self.inner.shown.lock().unwrap_or_else(|e| e.into_inner());
        if shown.len() >= super::MAX_IMAGES_PER_SCRIPT {
            return Err(ToolError::new(format!(
                "one script may show at most {} images",
                super::MAX_IMAGES_PER_SCRIPT
            )));
        }
        shown.push(super::ShownImage {
            path: shown_path,
            media_type: fitted.media_type,
            data: fitted.data,
        });
        Ok(answer)
    }

    fn exists(&self, path: &str) -> Result<Value, ToolError> {
        let at = self
            .resolve(path)
            .map_err(|why| ToolError::new(format!("'{path}' {why}")))?;
        if self.holds_mounts(&at.shown) {
            return Ok(Value::Bool(true));
        }
        beneath::exists(at.base, &at.rest)
            .map(Value::Bool)
            .map_err(|e| refused(&at.shown, e))
    }
}
