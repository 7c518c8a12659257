//! `expect.json_schema`: the subset of JSON Schema a canary's answer is held to, compiled when
//! the config is loaded (a keyword outside the subset is refused there, never ignored) and
//! applied to each answer (docs/measurement.md, "Known-answer canaries").
//!
//! The subset: `type` (a name or a list of names: `object`, `array`, `string`, `number`,
//! `integer`, `boolean`, `null`), `enum`, `const`, `properties`, `required`,
//! `additionalProperties` (`false` or a schema), `items` (a schema), `minItems`, `maxItems`,
//! `minLength`, `maxLength` (in characters), `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum` (numbers), `pattern` (a regular expression, unanchored, as JSON Schema
//! has it); `$schema`, `$id`, `title`, `description` and `examples` are annotations.

use serde_json::Value;

/// How deeply schemas may nest (a config is small; an answer deeper than its schema is not
/// walked further).
const MAX_DEPTH: usize = 32;

/// A compiled schema; equal when written alike.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    source: Value,
    node: Node,
}

impl PartialEq for JsonSchema {
    fn eq(&self, o: &Self) -> bool {
        self.source == o.source
    }
}

impl Eq for JsonSchema {}

#[derive(Debug, Clone, Default)]
struct Node {
    types: Vec<String>,
    one_of_values: Option<Vec<Value>>,
    properties: Vec<(String, Node)>,
    required: Vec<String>,
    /// `additionalProperties`: `None` allows any, `Some(None)` none, `Some(Some(n))` those `n`
    /// admits.
    additional: Option<Option<Box<Node>>>,
    items: Option<Box<Node>>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    pattern: Option<regex::Regex>,
}

const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

impl JsonSchema {
    /// Compiles a schema.
    ///
    /// # Errors
    /// What is not a schema of the subset, with its place (`properties.a.type`).
    pub fn compile(v: &Value) -> Result<JsonSchema, String> {
        Ok(JsonSchema {
            source: v.clone(),
            node: node(v, "", 0)?,
        })
    }

    /// Why `answer` (the visible text) is not JSON this schema admits, if it is not. A Markdown
    /// code fence around the JSON (```` ```json ```` ... ```` ``` ````) is taken off first.
    pub fn check(&self, answer: &str) -> Option<String> {
        let text = unfence(answer);
        let v: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return Some(format!("the answer is not JSON ({e})")),
        };
        self.node
            .admits(&v, "", 0)
            .err()
            .map(|why| format!("the answer's JSON does not match the schema: {why}"))
    }
}

/// The text inside one Markdown code fence around the whole answer, else the answer, trimmed.
fn unfence(s: &str) -> &str {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("```")
        && let Some(body) = rest.strip_suffix("```")
    {
        // The fence's info string (`json`) runs to the end of its line.
        return body.split_once('\n').map_or(body, |(_, b)| b).trim();
    }
    t
}

fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn count(v: &Value, path: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{path}: must be a whole number, at least 0"))
}

fn number(v: &Value, path: &str) -> Result<f64, String> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{path}: must be a number"))
}

fn node(v: &Value, path: &str, depth: usize) -> Result<Node, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested more than {MAX_DEPTH} deep"));
    }
    let Some(o) = v.as_object() else {
        return Err(format!(
            "{}: a schema is a mapping of keywords",
            if path.is_empty() { "json_schema" } else { path }
        ));
    };
    let mut n = Node::default();
    for (k, x) in o {
        let p = at(path, k);
        match k.as_str() {
            "$schema" | "$id" | "title" | "description" | "examples" => {}
            "type" => {
                let names: Vec<&Value> = match x {
                    Value::Array(a) => a.iter().collect(),
                    one => vec![one],
                };
                for name in names {
                    match name.as_str().filter(|s| TYPES.contains(s)) {
                        Some(s) => n.types.push(s.to_owned()),
                        None => return Err(format!("{p}: a type is one of {}", TYPES.join(", "))),
                    }
                }
            }
            "enum" => match x {
                Value::Array(a) if !a.is_empty() => n.one_of_values = Some(a.clone()),
                _ => return Err(format!("{p}: must be a list of values")),
            },
            "const" => n.one_of_values = Some(vec![x.clone()]),
            "properties" => {
                let Some(props) = x.as_object() else {
                    return Err(format!("{p}: must map names to schemas"));
                };
                for (name, s) in props {
                    n.properties
                        .push((name.clone(), node(s, &at(&p, name), depth + 1)?));
                }
            }
            "required" => {
                let names = x.as_array().and_then(|a| {
                    a.iter()
                        .map(|s| s.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                });
                n.required = names.ok_or_else(|| format!("{p}: must be a list of names"))?;
            }
            "additionalProperties" => {
                n.additional = match x {
                    Value::Bool(true) => None,
                    Value::Bool(false) => Some(None),
                    s => Some(Some(Box::new(node(s, &p, depth + 1)?))),
                };
            }
            "items" => n.items = Some(Box::new(node(x, &p, depth + 1)?)),
            "minItems" => n.min_items = Some(count(x, &p)?),
            "maxItems" => n.max_items = Some(count(x, &p)?),
            "minLength" => n.min_length = Some(count(x, &p)?),
            "maxLength" => n.max_length = Some(count(x, &p)?),
            "minimum" => n.minimum = Some(number(x, &p)?),
            "maximum" => n.maximum = Some(number(x, &p)?),
            "exclusiveMinimum" => n.exclusive_minimum = Some(number(x, &p)?),
            "exclusiveMaximum" => n.exclusive_maximum = Some(number(x, &p)?),
            "pattern" => {
                let re = x.as_str().ok_or_else(|| format!("{p}: must be a string"))?;
                n.pattern = Some(
                    regex::Regex::new(re)
                        .map_err(|e| format!("{p}: not a regular expression ({e})"))?,
                );
            }
            other => {
                return Err(format!(
                    "{p}: {other:?} is not a keyword of the subset tokenprobe checks (type, enum, const, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum, pattern)"
                ));
            }
        }
    }
    Ok(n)
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(v: &Value, name: &str) -> bool {
    match name {
        "integer" => v
            .as_f64()
            .is_some_and(|x| x.fract() == 0.0 && x.is_finite()),
        other => type_of(v) == other,
    }
}

impl Node {
    fn admits(&self, v: &Value, path: &str, depth: usize) -> Result<(), String> {
        let here = if path.is_empty() { "the value" } else { path };
        if depth > MAX_DEPTH {
            return Err(format!("{here}: nested more than {MAX_DEPTH} deep"));
        }
        if !self.types.is_empty() && !self.types.iter().any(|t| is_type(v, t)) {
            return Err(format!(
                "{here} is {}, not {}",
                type_of(v),
                self.types.join(" or ")
            ));
        }
        if let Some(values) = &self.one_of_values
            && !values.contains(v)
        {
            return Err(format!("{here} is none of the values allowed"));
        }
        match v {
            Value::Object(o) => {
                for name in &self.required {
                    if !o.contains_key(name) {
                        return Err(format!("{here} has no {name:?}"));
                    }
                }
                for (k, x) in o {
                    let p = at(path, k);
                    match (
                        self.properties.iter().find(|(n, _)| n == k),
                        &self.additional,
                    ) {
                        (Some((_, s)), _) => s.admits(x, &p, depth + 1)?,
                        (None, Some(None)) => {
                            return Err(format!("{here} has {k:?}, which is not allowed"));
                        }
                        (None, Some(Some(s))) => s.admits(x, &p, depth + 1)?,
                        (None, None) => {}
                    }
                }
            }
            Value::Array(a) => {
                let n = a.len() as u64;
                if self.min_items.is_some_and(|m| n < m) || self.max_items.is_some_and(|m| n > m) {
                    return Err(format!("{here} has {n} items"));
                }
                if let Some(s) = &self.items {
                    for (i, x) in a.iter().enumerate() {
                        s.admits(x, &format!("{here}[{i}]"), depth + 1)?;
                    }
                }
            }
            Value::String(s) => {
                let n = s.chars().count() as u64;
                if self.min_length.is_some_and(|m| n < m) || self.max_length.is_some_and(|m| n > m)
                {
                    return Err(format!("{here} has {n} characters"));
                }
                if let Some(re) = &self.pattern
                    && !re.is_match(s)
                {
                    return Err(format!("{here} does not match /{}/", re.as_str()));
                }
            }
            Value::Number(x) => {
                let x = x.as_f64().unwrap_or(f64::NAN);
                let out = self.minimum.is_some_and(|m| x < m)
                    || self.maximum.is_some_and(|m| x > m)
                    || self.exclusive_minimum.is_some_and(|m| x <= m)
                    || self.exclusive_maximum.is_some_and(|m| x >= m)
                    || x.is_nan();
                if out {
                    return Err(format!("{here} is {x}, out of its bounds"));
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_of_the_subset_checks_an_answer() {
        let s = JsonSchema::compile(&json!({
            "type": "object",
            "required": ["answer", "unit"],
            "properties": {
                "answer": {"type": "integer", "minimum": 0, "maximum": 10},
                "unit": {"enum": ["km", "mi"]},
                "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 2}
            },
            "additionalProperties": false
        }))
        .unwrap();
        assert_eq!(s.check(r#"{"answer": 4, "unit": "km"}"#), None);
        assert_eq!(
            s.check("```json\n{\"answer\": 4, \"unit\": \"mi\", \"tags\": [\"a\"]}\n```"),
            None,
            "a code fence around it"
        );
        for (answer, why) in [
            ("four", "not JSON"),
            (r#"{"answer": 4}"#, "has no \"unit\""),
            (r#"{"answer": 4.5, "unit": "km"}"#, "not integer"),
            (r#"{"answer": 11, "unit": "km"}"#, "out of its bounds"),
            (r#"{"answer": 4, "unit": "m"}"#, "none of the values"),
            (r#"{"answer": 4, "unit": "km", "x": 1}"#, "not allowed"),
            (
                r#"{"answer": 4, "unit": "km", "tags": ["A"]}"#,
                "does not match",
            ),
            (
                r#"{"answer": 4, "unit": "km", "tags": ["a","b","c"]}"#,
                "3 items",
            ),
            ("[1]", "is array, not object"),
        ] {
            let got = s.check(answer).unwrap_or_default();
            assert!(got.contains(why), "{answer}: {got}");
        }
    }

    #[test]
    fn what_is_not_of_the_subset_is_refused_with_its_place() {
        for (schema, why) in [
            (json!({"oneOf": []}), "\"oneOf\" is not a keyword"),
            (
                json!({"properties": {"a": {"type": "decimal"}}}),
                "properties.a.type",
            ),
            (json!({"pattern": "("}), "not a regular expression"),
            (json!({"minLength": -1}), "whole number"),
            (json!("object"), "a mapping of keywords"),
        ] {
            let e = JsonSchema::compile(&schema).unwrap_err();
            assert!(e.contains(why), "{schema}: {e}");
        }
        let mut deep = json!({});
        for _ in 0..40 {
            deep = json!({"items": deep});
        }
        assert!(JsonSchema::compile(&deep).unwrap_err().contains("nested"));
    }
}
