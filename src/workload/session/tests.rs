use super::replay::{Gap, Replay, parse};
use super::*;

/// One token a word, no template: sizes read as word counts.
const WORDS: TokenModel = TokenModel {
    overhead: 0.0,
    per_word: 1.0,
};

fn spec() -> AgentLoop {
    AgentLoop {
        system_tokens: 100,
        tools: 3,
        tool_tokens: 20,
        user_tokens: Length::Fixed(30),
        turns: Length::Fixed(3),
        call_tokens: Length::Fixed(16),
        result_tokens: Length::Uniform { min: 40, max: 60 },
        answer_tokens: Length::Fixed(64),
        think_time: Wait::Fixed(Duration::from_millis(250)),
        context_budget: 100_000,
        overflow: Overflow::End,
        subagents: None,
        tool_choice: ToolChoice::Required,
        seed: Some(7),
    }
}

fn words_of(m: &Message) -> usize {
    m.content.split(' ').filter(|w| !w.is_empty()).count()
}

/// A server's answer to a tool-call turn: one call, `input` counted.
fn call(id: &str, input: u64) -> (Vec<ToolCall>, Option<u64>) {
    (
        vec![ToolCall {
            id: id.into(),
            name: "tool_1".into(),
            arguments: r#"{"query":"x"}"#.into(),
        }],
        Some(input),
    )
}

fn answered<'a>(calls: &'a [ToolCall], input: Option<u64>) -> Answer<'a> {
    Answer {
        ok: true,
        text: "",
        tool_calls: calls,
        input_tokens: input,
        output_tokens: 10,
    }
}

fn send(step: Step) -> Turn {
    match step {
        Step::Send(t) => *t,
        other => panic!("expected a turn, got {other:?}"),
    }
}

/// The loop: system prompt and tools, a first message, tool-call turns that append the call and
/// a result of a drawn size after the think time, then the final answer without tools asked for.
#[test]
fn a_session_calls_tools_then_answers() {
    let sessions = Sessions::Agent(Box::new(spec()));
    let mut b = sessions.start(5, WORDS);
    let t1 = send(b.next(None));
    let c = &t1.content;
    assert_eq!(t1.wait, Duration::ZERO);
    assert_eq!(
        (c.turn, c.max_tokens, c.tool_choice),
        (Some(1), Some(16), Some(ToolChoice::Required))
    );
    assert_eq!(c.session, Some(SessionRef { id: 5, branch: 0 }));
    let tools = c.tools.clone().unwrap();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[2].name, "tool_2");
    assert_eq!(tools[0].description.split(' ').count(), 20);
    assert_eq!(c.messages.len(), 2);
    assert_eq!(
        (c.messages[0].role.as_str(), words_of(&c.messages[0])),
        ("system", 100)
    );
    assert_eq!(
        (c.messages[1].role.as_str(), words_of(&c.messages[1])),
        ("user", 30)
    );
    // Every session of the prompt shares the system prompt and the tools; not the task.
    let other = send(sessions.start(6, WORDS).next(None)).content;
    assert_eq!(other.messages[0], c.messages[0]);
    assert_eq!(other.tools.as_deref(), Some(&tools[..]));
    assert_ne!(other.messages[1], c.messages[1]);

    let (calls, input) = call("call_a", 170);
    let t2 = send(b.next(Some(&answered(&calls, input))));
    assert_eq!(t2.wait, Duration::from_millis(250), "the tool's latency");
    let m = &t2.content.messages;
    assert_eq!(m.len(), 4);
    assert_eq!(m[..2], c.messages[..]);
    assert_eq!(m[2].role, "assistant");
    assert_eq!(m[2].tool_calls, calls);
    assert_eq!(m[3].tool_call_id.as_deref(), Some("call_a"));
    assert!((40..=60).contains(&words_of(&m[3])), "{}", words_of(&m[3]));
    assert_eq!(t2.content.turn, Some(2));

    // A call without an id or a name gets them; two calls get two results.
    let two = [
        ToolCall::default(),
        ToolCall {
            id: "call_c".into(),
            ..ToolCall::default()
        },
    ];
    let t3 = send(b.next(Some(&answered(&two, Some(300)))));
    let m = &t3.content.messages;
    assert_eq!(m.len(), 7);
    assert_eq!(m[4].tool_calls[0].id, "call_0_2_0");
    assert_eq!(m[4].tool_calls[0].name, "tool_0");
    assert_eq!(m[5].tool_call_id.as_deref(), Some("call_0_2_0"));
    assert_eq!(m[6].tool_call_id.as_deref(), Some("call_c"));

    // The third call answered: the final answer, tools still offered, none asked for.
    let t4 = send(b.next(Some(&answered(&calls, Some(450)))));
    assert_eq!(t4.content.tool_choice, Some(ToolChoice::None));
    assert_eq!(t4.content.max_tokens, Some(64));
    assert_eq!(t4.content.tools.as_deref(), Some(&tools[..]));
    assert!(matches!(
        b.next(Some(&answered(&[], Some(600)))),
        Step::Done(End::Completed)
    ));
    assert!(matches!(b.next(None), Step::Done(End::Failed)), "over");

    // Deterministic: the same session, the same answers, the same turns.
    let mut again = sessions.start(5, WORDS);
    assert_eq!(send(again.next(None)), t1);
    assert_eq!(send(again.next(Some(&answered(&calls, input)))), t2);
}

/// An answer that calls no tool: its text is kept, and the tool's result goes as a user message
/// (a `tool` message needs a call to answer).
#[test]
fn an_answer_without_a_call_gets_its_result_as_a_user_message() {
    let mut b = Sessions::Agent(Box::new(spec())).start(1, WORDS);
    let _ = b.next(None);
    let t = send(b.next(Some(&Answer {
        ok: true,
        text: "I will look",
        tool_calls: &[],
        input_tokens: None,
        output_tokens: 3,
    })));
    let m = &t.content.messages;
    assert_eq!(m[2], Message::new("assistant", "I will look"));
    assert_eq!(
        (m[3].role.as_str(), m[3].tool_call_id.is_none()),
        ("user", true)
    );
    // A failed turn ends the session.
    assert!(matches!(
        b.next(Some(&Answer {
            ok: false,
            ..answered(&[], None)
        })),
        Step::Done(End::Failed)
    ));
}

/// Past the budget, `overflow: end` ends the session; `compact` replaces the turns so far by a
/// summary, keeping the system prompt and the last call with its results.
#[test]
fn the_budget_compacts_or_ends_a_session() {
    let tight = AgentLoop {
        context_budget: 400,
        result_tokens: Length::Fixed(100),
        turns: Length::Fixed(10),
        ..spec()
    };
    // 100 system + 60 tools + 30 task = 190; each turn adds its output (10) and a result (100).
    let mut b = Sessions::Agent(Box::new(tight.clone())).start(1, WORDS);
    let _ = b.next(None);
    let (calls, _) = call("c", 0);
    let t2 = send(b.next(Some(&answered(&calls, None))));
    assert_eq!(t2.content.turn, Some(2), "190 + 10 + 100 = 300 fits");
    assert!(
        matches!(
            b.next(Some(&answered(&calls, None))),
            Step::Done(End::Budget)
        ),
        "300 + 10 + 100 = 410 does not"
    );
    assert_eq!(b.compactions(), 0);
    // An answer whose usage under-counts it is sized by its bytes: 2,000 bytes of text said to
    // be 1 token take 500 of the budget, and the next turn does not fit.
    let mut b = Sessions::Agent(Box::new(tight.clone())).start(1, WORDS);
    let _ = b.next(None);
    let long = "x".repeat(2000);
    assert!(matches!(
        b.next(Some(&Answer {
            text: &long,
            output_tokens: 1,
            ..answered(&calls, None)
        })),
        Step::Done(End::Budget)
    ));

    let compact = AgentLoop {
        overflow: Overflow::Compact { summary_tokens: 50 },
        ..tight
    };
    let mut b = Sessions::Agent(Box::new(compact)).start(1, WORDS);
    let _ = b.next(None);
    let _ = send(b.next(Some(&answered(&calls, None))));
    // The server counted the last request: 390 + 10 + 100 is past 400.
    let t3 = send(b.next(Some(&answered(&calls, Some(390)))));
    assert_eq!(b.compactions(), 1);
    let m = &t3.content.messages;
    let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(words_of(&m[1]), 50, "the summary");
    assert_eq!(m[2].tool_calls, calls, "the last call kept");
    assert_eq!(t3.content.turn, Some(3));
    // The session goes on from the compacted context.
    let t4 = send(b.next(Some(&answered(&calls, Some(200)))));
    assert_eq!(t4.content.messages.len(), 6);
    assert_eq!(b.compactions(), 1);
}

/// Every `every` calls, `count` sub-agents fork from the context of the parent's last request,
/// each with a task of its own and its own tool calls; the parent continues once joined.
#[test]
fn sub_agents_fork_from_the_parents_prefix_and_join_before_its_next_turn() {
    let s = AgentLoop {
        subagents: Some(Subagents {
            count: 2,
            every: 2,
            turns: Length::Fixed(1),
        }),
        ..spec()
    };
    let mut parent = Sessions::Agent(Box::new(s)).start(9, WORDS);
    let _ = parent.next(None);
    let (calls, input) = call("p1", 200);
    let t2 = send(parent.next(Some(&answered(&calls, input))));
    let sent = t2.content.messages.clone();
    // The second call forks.
    let Step::Fork(mut children) = parent.next(Some(&answered(&calls, Some(300)))) else {
        panic!("expected a fork")
    };
    assert_eq!(children.len(), 2);
    let ids: Vec<SessionRef> = children.iter().map(Branch::id).collect();
    assert_eq!(
        ids,
        [
            SessionRef { id: 9, branch: 1 },
            SessionRef { id: 9, branch: 2 }
        ]
    );
    let mut firsts = Vec::new();
    for c in &mut children {
        let t = send(c.next(None));
        let m = &t.content.messages;
        assert_eq!(m[..sent.len()], sent[..], "the parent's whole prefix");
        assert_eq!(m.len(), sent.len() + 1, "and a task");
        assert_eq!(m[sent.len()].role, "user");
        assert_eq!(t.content.tool_choice, Some(ToolChoice::Required));
        firsts.push(t.content.messages[sent.len()].clone());
        // One call each, then its final answer, then over.
        let t = send(c.next(Some(&answered(&calls, Some(300)))));
        assert_eq!(t.content.tool_choice, Some(ToolChoice::None));
        assert!(matches!(
            c.next(Some(&answered(&[], Some(400)))),
            Step::Done(End::Completed)
        ));
    }
    assert_ne!(firsts[0], firsts[1], "each child its own task");
    // Joined: the parent's call gets its result, no think time, and the session goes on.
    let t3 = send(parent.joined());
    assert_eq!(t3.wait, Duration::ZERO);
    assert_eq!(t3.content.turn, Some(3));
    let m = &t3.content.messages;
    assert_eq!(m[m.len() - 1].tool_call_id.as_deref(), Some("p1"));
    // Children never fork, whatever their calls.
    let mut more = Sessions::Agent(Box::new(AgentLoop {
        subagents: Some(Subagents {
            count: 1,
            every: 1,
            turns: Length::Fixed(3),
        }),
        ..spec()
    }))
    .start(1, WORDS);
    let _ = more.next(None);
    let Step::Fork(mut kids) = more.next(Some(&answered(&calls, None))) else {
        panic!("fork")
    };
    let _ = kids[0].next(None);
    assert!(matches!(
        kids[0].next(Some(&answered(&calls, None))),
        Step::Send(_)
    ));
    // Numbering goes on across forks.
    let _ = more.joined();
    let Step::Fork(kids) = more.next(Some(&answered(&calls, None))) else {
        panic!("fork")
    };
    assert_eq!(kids[0].id().branch, 2);
}

/// Think times and result sizes come from their distributions, seeded per session.
#[test]
fn draws_follow_their_distributions_and_the_seed() {
    let s = AgentLoop {
        think_time: Wait::Uniform {
            min: Duration::from_millis(100),
            max: Duration::from_millis(300),
        },
        turns: Length::Fixed(1000),
        ..spec()
    };
    let mut b = Sessions::Agent(Box::new(s.clone())).start(3, WORDS);
    let _ = b.next(None);
    let (calls, _) = call("c", 0);
    let mut waits = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..200 {
        let t = send(b.next(Some(&answered(&calls, Some(500)))));
        waits.push(t.wait);
        sizes.push(words_of(t.content.messages.last().unwrap()));
    }
    assert!(waits.iter().all(|w| (100..=300).contains(&w.as_millis())));
    assert!(sizes.iter().all(|n| (40..=60).contains(n)));
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    assert!((47.0..53.0).contains(&mean), "{mean}");
    assert!(sizes.iter().collect::<std::collections::HashSet<_>>().len() > 10);
    // Another seed, other draws.
    let mut c = Sessions::Agent(Box::new(AgentLoop { seed: Some(8), ..s })).start(3, WORDS);
    let _ = c.next(None);
    let other: Vec<Duration> = (0..20)
        .map(|_| send(c.next(Some(&answered(&calls, Some(500))))).wait)
        .collect();
    assert_ne!(other, waits[..20]);
    // The exponential wait's mean, and its cut.
    let e = Wait::Exponential {
        mean: Duration::from_millis(100),
        max: Duration::from_millis(400),
    };
    let mut rng = Rng::new(1);
    let d: Vec<f64> = (0..20_000)
        .map(|_| e.draw(&mut rng).as_secs_f64())
        .collect();
    assert!(d.iter().all(|x| *x <= 0.4));
    let m = d.iter().sum::<f64>() / d.len() as f64;
    // The mean of an exponential cut at 4 means: mean × (1 - e^-4) ≈ 0.0982.
    assert!((0.095..0.101).contains(&m), "{m}");
}

// -- session traces ---------------------------------------------------------------------------

fn lines(l: &[&str]) -> String {
    l.join("\n")
}

/// Sessions by `session_id`, their turns in file order, gaps after the previous answer or from
/// the session's start; a row without an id is a session of its own; sessions by their start.
#[test]
fn session_traces_group_turns_by_session() {
    let r = parse(&lines(&[
        r#"{"session_id": "a", "timestamp": 2000, "input_length": 600, "output_length": 20, "hash_ids": [1, 2]}"#,
        r#"{"session_id": "b", "timestamp": 1000, "input_length": 50, "output_length": 5}"#,
        "",
        r#"{"session_id": "a", "delay": 1500, "input_length": 40, "output_length": 8}"#,
        r#"{"session_id": "a", "timestamp": 9000, "input_length": 30, "output_length": 8, "hash_ids": [7]}"#,
        r#"{"timestamp": 1500, "input_length": 10, "output_length": 1}"#,
        r#"{"session_id": 42, "input_length": 10, "output_length": 1}"#,
    ]))
    .unwrap();
    assert_eq!(r.turns, 6);
    let ids: Vec<&str> = r.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["42", "b", "line 6", "a"]);
    let starts: Vec<f64> = r.sessions.iter().map(|s| s.start_s).collect();
    assert_eq!(starts, [0.0, 1.0, 1.5, 2.0]);
    let a = &r.sessions[3];
    assert_eq!(a.turns.len(), 3);
    assert_eq!(a.turns[0].hash_ids, [1, 2]);
    assert_eq!(a.turns[1].gap, Gap::After(1.5));
    assert_eq!(
        a.turns[2].gap,
        Gap::At(7.0),
        "9 s, 7 s after its session's start"
    );
    assert_eq!((a.turns[1].input_tokens, a.turns[1].output_tokens), (40, 8));
}

#[test]
fn bad_session_traces_are_refused_with_their_line_and_reason() {
    let ok = r#"{"session_id": "s", "timestamp": 5000, "input_length": 5, "output_length": 3}"#;
    let cases: &[(&str, &str)] = &[
        (
            r#"{"session_id": "s", "timestamp": 4000, "input_length": 5, "output_length": 3}"#,
            "line 2: its timestamp is 1.000 s before its session's previous turn's",
        ),
        (
            r#"{"session_id": "s", "delay": 10, "output_length": 3}"#,
            "line 2: input_length is missing (every turn needs its lengths)",
        ),
        (
            r#"{"session_id": "s", "delay": 10, "input_length": 5}"#,
            "line 2: output_length is missing",
        ),
        (
            r#"{"session_id": "s", "delay": 10, "timestamp": 6000, "input_length": 5, "output_length": 3}"#,
            "line 2: a turn has a timestamp or a delay, not both",
        ),
        (
            r#"{"session_id": "t", "delay": 10, "input_length": 5, "output_length": 3}"#,
            "line 2: a session's first turn has a delay",
        ),
        (
            r#"{"session_id": "s", "delay": -1, "input_length": 5, "output_length": 3}"#,
            "line 2: delay -1 is negative",
        ),
        (
            r#"{"session_id": "s", "delay": 1, "input_length": 0, "output_length": 3}"#,
            "line 2: input_length 0 is not a whole number of tokens",
        ),
        (
            r#"{"session_id": "s", "delay": 1, "input_length": 2.5, "output_length": 3}"#,
            "line 2: input_length 2.5 is not a whole number",
        ),
        (
            r#"{"session_id": "s", "delay": 1, "input_length": "5", "output_length": 3}"#,
            "line 2: input_length is not a number",
        ),
        (
            r#"{"session_id": [], "input_length": 5, "output_length": 3}"#,
            "line 2: session_id is not a string or a number",
        ),
        (
            r#"{"session_id": "s", "delay": 1, "input_length": 5, "output_length": 3, "hash_ids": [-1]}"#,
            "line 2: hash_ids[0] is not a whole number",
        ),
        (
            r#"{"session_id": "s", "delay": 1, "input_length": 1048576, "output_length": 1}"#,
            "line 2: session \"s\" grows past 1048576 tokens",
        ),
        (r#"{"session_id": "s", "del"#, "line 2: not JSON"),
        ("[1]", "line 2: a JSON object per line is expected"),
    ];
    for (line, want) in cases {
        let e = parse(&lines(&[ok, line])).unwrap_err();
        assert!(e.starts_with(want), "{line}: {e}");
    }
    assert_eq!(parse("\n \n").unwrap_err(), "holds no session");
    // A secret in a bad line is never quoted.
    let e = parse(r#"{"session_id": "s", "input_length": "sk-live-SECRET", "output_length": 1}"#)
        .unwrap_err();
    assert!(!e.contains("SECRET"), "{e}");
}

fn replay(text: &str) -> Sessions {
    Sessions::Replay(Replay {
        file: "s.jsonl".into(),
        time_scale: 0.5,
        seed: Some(3),
        recording: Arc::new(OnceLock::from(parse(text).unwrap())),
    })
}

use std::sync::OnceLock;

/// A replayed session: each turn's new input appended after the previous answer, at its gap;
/// equal hash ids are equal text, in any session.
#[test]
fn a_replayed_session_appends_each_turn_at_its_gap() {
    let s = replay(&lines(&[
        r#"{"session_id": "a", "timestamp": 0, "input_length": 1024, "output_length": 20, "hash_ids": [1, 2]}"#,
        r#"{"session_id": "b", "timestamp": 4000, "input_length": 600, "output_length": 20, "hash_ids": [1, 9]}"#,
        r#"{"session_id": "a", "delay": 2000, "input_length": 40, "output_length": 8}"#,
        r#"{"session_id": "a", "timestamp": 10000, "input_length": 30, "output_length": 4}"#,
    ]));
    let Sessions::Replay(r) = &s else {
        unreachable!()
    };
    assert_eq!(r.len(), 2);
    assert_eq!(
        r.start_offset(1),
        Duration::from_secs(2),
        "4 s at half time"
    );
    let mut a = s.start(0, WORDS);
    let t1 = send(a.next(None));
    assert_eq!((t1.wait, t1.at), (Duration::ZERO, None));
    let c = &t1.content;
    assert_eq!(
        (c.max_tokens, c.requested_input_tokens, c.turn),
        (Some(20), Some(1024), Some(1))
    );
    let first: Vec<&str> = c.messages[0].content.split(' ').collect();
    assert_eq!(first.len(), 1024);
    let t2 = send(a.next(Some(&Answer {
        text: "the answer",
        ..answered(&[], None)
    })));
    assert_eq!(t2.wait, Duration::from_secs(1), "2 s at half time");
    let m = &t2.content.messages;
    assert_eq!(m.len(), 3);
    assert_eq!(m[0], c.messages[0]);
    assert_eq!(m[1], Message::new("assistant", "the answer"));
    assert_eq!(words_of(&m[2]), 40);
    assert_eq!(t2.content.requested_input_tokens, None);
    let t3 = send(a.next(Some(&answered(&[], None))));
    assert_eq!(
        t3.at,
        Some(Duration::from_secs(5)),
        "10 s after its start, halved"
    );
    assert_eq!(t3.content.messages.len(), 4, "an empty answer adds nothing");
    assert!(matches!(
        a.next(Some(&answered(&[], None))),
        Step::Done(End::Completed)
    ));
    // Session b shares block 1 (512 words) with a, then its own block 9.
    let b = send(s.start(1, WORDS).next(None)).content;
    let bw: Vec<&str> = b.messages[0].content.split(' ').collect();
    assert_eq!(bw.len(), 600);
    assert_eq!(bw[..512], first[..512]);
    assert_ne!(bw[512..], first[512..600]);
    // Deterministic, and a failed turn ends the session.
    let mut again = s.start(0, WORDS);
    assert_eq!(send(again.next(None)), t1);
    assert!(matches!(
        again.next(Some(&Answer {
            ok: false,
            ..answered(&[], None)
        })),
        Step::Done(End::Failed)
    ));
    // An answer far past its recorded output is kept within 16 bytes a token of it (20 tokens).
    let mut c = s.start(0, WORDS);
    let _ = c.next(None);
    let long = "é".repeat(1000);
    let t = send(c.next(Some(&Answer {
        text: &long,
        ..answered(&[], None)
    })));
    assert_eq!(t.content.messages[1].content.len(), 320);
    // An unread trace sends nothing.
    let unread = Sessions::Replay(Replay {
        recording: Arc::default(),
        ..r.clone()
    });
    assert!(matches!(
        unread.start(0, WORDS).next(None),
        Step::Done(End::Failed)
    ));
}
