//! Dataset files: ShareGPT JSON and JSONL of message lists, parsed into the conversations a
//! `dataset` prompt sends. Every problem names the entry (or line) and what is wrong with it.
//!
//! - ShareGPT: one JSON list of `{"conversations": [{"from": "human"|"gpt"|"system", "value":
//!   "..."}]}` (other keys of an entry, such as `id`, are ignored; `user`/`assistant`/`chatgpt`
//!   are accepted as `from` too).
//! - JSONL: one conversation per non-blank line, `{"messages": [{"role", "content"}]}` or a bare
//!   list of messages.
//!
//! A conversation is sent up to and including its last user message (the recorded answers after
//! it are what the model is asked to produce).

use crate::protocol::Message;
use serde::Deserialize;

/// A dataset's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetFormat {
    /// ShareGPT JSON.
    Sharegpt,
    /// One message list per line.
    Jsonl,
}

/// The most conversations one dataset may hold.
pub const MAX_ENTRIES: usize = 1_000_000;

#[derive(Deserialize)]
struct ShareGptEntry {
    conversations: Vec<ShareGptTurn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShareGptTurn {
    from: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonlLine {
    Object { messages: Vec<Message> },
    List(Vec<Message>),
}

/// The conversations of a dataset file's text.
///
/// # Errors
/// What is wrong and where (`entry 3: ...`, `line 7: ...`), without quoting the file's text.
pub fn parse(text: &str, format: DatasetFormat) -> Result<Vec<Vec<Message>>, String> {
    let out = match format {
        DatasetFormat::Sharegpt => sharegpt(text)?,
        DatasetFormat::Jsonl => jsonl(text)?,
    };
    if out.is_empty() {
        return Err("holds no conversation".into());
    }
    if out.len() > MAX_ENTRIES {
        return Err(format!("more than {MAX_ENTRIES} conversations"));
    }
    Ok(out)
}

fn json_error(e: &serde_json::Error) -> String {
    // serde_json's messages name types and positions, never the data.
    e.to_string()
}

fn sharegpt(text: &str) -> Result<Vec<Vec<Message>>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // The list's entries as slices of the text (no tree of JSON values: that took about 35
    // times the file's size), each then read into its conversation.
    let entries: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).map_err(|e| {
        format!(
            "not ShareGPT JSON (a list of {{\"conversations\": [...]}}): {}",
            json_error(&e)
        )
    })?;
    if entries.len() > MAX_ENTRIES {
        return Err(format!("more than {MAX_ENTRIES} conversations"));
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let e: ShareGptEntry = serde_json::from_str(v.get()).map_err(|e| {
                format!(
                    "entry {i}: not a ShareGPT conversation ({{\"conversations\": [{{\"from\", \"value\"}}]}}): {}",
                    json_error(&e)
                )
            })?;
            let messages = e
                .conversations
                .into_iter()
                .enumerate()
                .map(|(j, t)| {
                    let role = match t.from.as_str() {
                        "human" | "user" => "user",
                        "gpt" | "chatgpt" | "assistant" | "bard" | "bing" => "assistant",
                        "system" => "system",
                        other => {
                            return Err(format!(
                                "entry {i}: conversations[{j}].from is {other:?} (human, gpt, system)"
                            ));
                        }
                    };
                    Ok(Message {
                        role: role.into(),
                        content: t.value,
                        ..Default::default()
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            up_to_last_user(messages).ok_or_else(|| format!("entry {i}: has no human message"))
        })
        .collect()
}

fn jsonl(text: &str) -> Result<Vec<Vec<Message>>, String> {
    // A byte-order mark before the first line (editors on Windows write one) is not data.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let parsed: JsonlLine = serde_json::from_str(line).map_err(|_| {
            format!(
                "line {n}: not a message list ({{\"messages\": [{{\"role\", \"content\"}}]}} or [{{\"role\", \"content\"}}])"
            )
        })?;
        let messages = match parsed {
            JsonlLine::Object { messages } | JsonlLine::List(messages) => messages,
        };
        if let Some((j, m)) = messages
            .iter()
            .enumerate()
            .find(|(_, m)| !["system", "user", "assistant", "developer"].contains(&m.role.as_str()))
        {
            return Err(format!(
                "line {n}: messages[{j}].role is {:?} (system, user, assistant, developer)",
                m.role
            ));
        }
        out.push(
            up_to_last_user(messages).ok_or_else(|| format!("line {n}: has no user message"))?,
        );
    }
    Ok(out)
}

/// The messages up to and including the last user message; `None` without one.
fn up_to_last_user(mut m: Vec<Message>) -> Option<Vec<Message>> {
    let last = m.iter().rposition(|m| m.role == "user")?;
    m.truncate(last + 1);
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharegpt_conversations_end_at_the_last_human_turn() {
        let text = r#"[
          {"id": "a", "conversations": [{"from": "system", "value": "be brief"},
            {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"},
            {"from": "human", "value": "and?"}, {"from": "gpt", "value": "bye"}]},
          {"conversations": [{"from": "human", "value": "one"}]}
        ]"#;
        let c = parse(text, DatasetFormat::Sharegpt).unwrap();
        assert_eq!(c.len(), 2);
        let roles: Vec<&str> = c[0].iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(c[0][3].content, "and?");
        assert_eq!(c[1][0].content, "one");
    }

    #[test]
    fn jsonl_objects_and_bare_lists() {
        let text = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n\n[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"x\"}]\n";
        let c = parse(text, DatasetFormat::Jsonl).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].len(), 2, "the trailing answer is not sent");
        assert_eq!(c[1][1].content, "b");
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_not_data() {
        let jsonl = "\u{feff}{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n";
        assert_eq!(
            parse(jsonl, DatasetFormat::Jsonl).unwrap()[0][0].content,
            "a"
        );
        let sharegpt = "\u{feff}[{\"conversations\": [{\"from\": \"human\", \"value\": \"b\"}]}]";
        assert_eq!(
            parse(sharegpt, DatasetFormat::Sharegpt).unwrap()[0][0].content,
            "b"
        );
    }

    #[test]
    fn every_bad_file_says_which_entry_and_what() {
        let cases: [(&str, DatasetFormat, &str); 9] = [
            ("", DatasetFormat::Sharegpt, "not ShareGPT JSON"),
            (
                "{\"conversations\": []}",
                DatasetFormat::Sharegpt,
                "not ShareGPT JSON",
            ),
            ("[]", DatasetFormat::Sharegpt, "holds no conversation"),
            (
                "[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}]}, {\"turns\": []}]",
                DatasetFormat::Sharegpt,
                "entry 1: not a ShareGPT conversation",
            ),
            (
                "[{\"conversations\": [{\"from\": \"robot\", \"value\": \"a\"}]}]",
                DatasetFormat::Sharegpt,
                "entry 0: conversations[0].from is \"robot\"",
            ),
            (
                "[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"a\"}]}]",
                DatasetFormat::Sharegpt,
                "entry 0: has no human message",
            ),
            (
                "[{\"role\": \"user\", \"content\": \"a\"}]\nnot json\n",
                DatasetFormat::Jsonl,
                "line 2: not a message list",
            ),
            (
                "[{\"role\": \"bot\", \"content\": \"a\"}]",
                DatasetFormat::Jsonl,
                "line 1: messages[0].role is \"bot\"",
            ),
            (
                "\n[{\"role\": \"assistant\", \"content\": \"a\"}]",
                DatasetFormat::Jsonl,
                "line 2: has no user message",
            ),
        ];
        for (text, f, want) in cases {
            let e = parse(text, f).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // A ShareGPT file read as JSONL (a JSON list over many lines) is not one message list per line.
        let e = parse("[\n{\"conversations\": []}\n]", DatasetFormat::Jsonl).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }
}
