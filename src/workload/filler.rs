//! Filler text of a requested token length, and the model of how a server counts it.
//!
//! Filler is words drawn from a list of common English words, each one token (with its leading
//! space) in the byte-level BPE vocabularies of current chat models, so a prompt's token count is
//! close to linear in its word count. Which words come is drawn per request, so no two requests
//! share more than the first few words by chance (278 words: the chance that two requests start
//! with the same k words is 278^-k); only a `shared_prefix_tokens` part is the same in every
//! request. How many tokens a server counts for a prompt of `w` words is learned from the server
//! (calibration, see [`TokenModel::fit`]), chat template included.

use crate::rng::Rng;

/// The filler vocabulary: 278 short, common, lower-case English words.
pub const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "oil",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
    "over",
    "new",
    "sound",
    "take",
    "only",
    "little",
    "work",
    "know",
    "place",
    "year",
    "live",
    "me",
    "back",
    "give",
    "most",
    "very",
    "after",
    "thing",
    "our",
    "just",
    "name",
    "good",
    "man",
    "think",
    "say",
    "great",
    "where",
    "help",
    "through",
    "much",
    "before",
    "line",
    "right",
    "too",
    "mean",
    "old",
    "any",
    "same",
    "tell",
    "boy",
    "follow",
    "came",
    "want",
    "show",
    "also",
    "around",
    "form",
    "three",
    "small",
    "set",
    "put",
    "end",
    "does",
    "another",
    "well",
    "large",
    "must",
    "big",
    "even",
    "such",
    "because",
    "turn",
    "here",
    "why",
    "ask",
    "went",
    "men",
    "read",
    "need",
    "land",
    "different",
    "home",
    "us",
    "move",
    "try",
    "kind",
    "hand",
    "picture",
    "again",
    "change",
    "off",
    "play",
    "air",
    "away",
    "animal",
    "house",
    "point",
    "page",
    "letter",
    "mother",
    "answer",
    "found",
    "study",
    "still",
    "learn",
    "should",
    "world",
    "high",
    "every",
    "near",
    "add",
    "food",
    "between",
    "own",
    "below",
    "country",
    "plant",
    "last",
    "school",
    "father",
    "keep",
    "tree",
    "never",
    "start",
    "city",
    "earth",
    "eye",
    "light",
    "thought",
    "head",
    "under",
    "story",
    "saw",
    "left",
    "few",
    "while",
    "along",
    "might",
    "close",
    "something",
    "seem",
    "next",
    "hard",
    "open",
    "example",
    "begin",
    "life",
    "always",
    "those",
    "both",
    "paper",
    "together",
    "got",
    "group",
    "often",
    "run",
    "important",
    "until",
    "children",
    "side",
    "feet",
    "car",
    "mile",
    "night",
    "walk",
    "white",
    "sea",
    "began",
    "grow",
    "took",
    "river",
    "four",
    "carry",
    "state",
    "once",
    "book",
    "hear",
    "stop",
    "without",
    "second",
    "later",
    "miss",
    "idea",
    "enough",
    "eat",
    "face",
    "watch",
    "far",
    "real",
    "almost",
];

/// `n` filler words, separated by single spaces, drawn from `rng`.
pub(crate) fn words(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    s
}

/// How a server counts the tokens of a filler prompt: `prompt_tokens ≈ overhead + per_word ·
/// words`. `overhead` is the chat template and whatever the request adds around the filler;
/// `per_word` the tokens per filler word.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenModel {
    /// Tokens the server counts besides the filler words.
    pub overhead: f64,
    /// Tokens per filler word.
    pub per_word: f64,
}

impl TokenModel {
    /// The model without calibration (no usage reported): one token per word, nothing else.
    pub const UNCALIBRATED: TokenModel = TokenModel {
        overhead: 0.0,
        per_word: 1.0,
    };

    /// Words of filler for a whole prompt of `tokens` tokens (template included), at least 1.
    pub fn words_for_prompt(&self, tokens: u32) -> usize {
        ((f64::from(tokens) - self.overhead) / self.per_word)
            .round()
            .max(1.0) as usize
    }

    /// Words of filler for `tokens` tokens inside a prompt (no template), at least 0.
    pub fn words_for(&self, tokens: u32) -> usize {
        (f64::from(tokens) / self.per_word).round().max(0.0) as usize
    }

    /// The least-squares line through `(words, prompt_tokens)` points (at least two distinct word
    /// counts); `None` when the points cannot give a usable model (one size only, or a slope
    /// that is not positive).
    pub fn fit(points: &[(f64, f64)]) -> Option<TokenModel> {
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        if sxx <= 0.0 {
            return None;
        }
        let per_word = sxy / sxx;
        if !(per_word.is_finite() && per_word > 0.0) {
            return None;
        }
        Some(TokenModel {
            overhead: my - per_word * mx,
            per_word,
        })
    }
}

/// The calibration's filler sizes (words): three sizes over two orders of magnitude, small enough
/// for any context and cheap to prefill.
pub const CALIBRATION_WORDS: [usize; 3] = [16, 64, 256];

/// True when an achieved input length is off the requested one by more than 2% of the requested
/// length or 4 tokens, whichever is larger (the `input_length_off` flag of docs/measurement.md).
pub fn input_length_off(requested: u64, achieved: u64) -> bool {
    let tolerance = (requested as f64 * 0.02).max(4.0);
    (achieved as f64 - requested as f64).abs() > tolerance
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_vocabulary_has_no_duplicates_and_no_spaces() {
        let set: HashSet<_> = WORDS.iter().collect();
        assert_eq!(set.len(), WORDS.len());
        assert!(
            WORDS
                .iter()
                .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()))
        );
    }

    #[test]
    fn words_have_the_count_asked_for() {
        let mut rng = Rng::new(1);
        assert_eq!(words(&mut rng, 0), "");
        assert_eq!(words(&mut rng, 1).split(' ').count(), 1);
        assert_eq!(words(&mut rng, 500).split(' ').count(), 500);
    }

    /// Filler of different requests does not repeat: 200 requests of 64 words share no 8-word
    /// run, and their first words are spread over the vocabulary.
    #[test]
    fn filler_does_not_repeat_between_requests() {
        let texts: Vec<Vec<String>> = (0..200)
            .map(|seq| {
                let mut rng = Rng::for_request(42, seq);
                words(&mut rng, 64).split(' ').map(str::to_owned).collect()
            })
            .collect();
        let mut grams = HashSet::new();
        let mut total = 0;
        for t in &texts {
            for w in t.windows(8) {
                grams.insert(w.join(" "));
                total += 1;
            }
        }
        assert_eq!(grams.len(), total, "an 8-word run repeated");
        let firsts: HashSet<_> = texts.iter().map(|t| t[0].clone()).collect();
        assert!(firsts.len() > 100, "{}", firsts.len());
        let mut a = Rng::for_request(42, 3);
        let mut b = Rng::for_request(42, 3);
        assert_eq!(
            words(&mut a, 20),
            words(&mut b, 20),
            "deterministic under a seed"
        );
    }

    #[test]
    fn fit_recovers_a_line() {
        let m = TokenModel::fit(&[(16.0, 46.0), (128.0, 158.0), (512.0, 542.0)]).unwrap();
        assert!(
            (m.per_word - 1.0).abs() < 1e-9 && (m.overhead - 30.0).abs() < 1e-9,
            "{m:?}"
        );
        let m = TokenModel::fit(&[(10.0, 32.0), (20.0, 52.0)]).unwrap();
        assert!((m.per_word - 2.0).abs() < 1e-9 && (m.overhead - 12.0).abs() < 1e-9);
        assert_eq!(m.words_for_prompt(112), 50);
        assert_eq!(m.words_for_prompt(5), 1, "at least one word");
        assert_eq!(m.words_for(40), 20);
        assert!(TokenModel::fit(&[(10.0, 30.0)]).is_none());
        assert!(TokenModel::fit(&[(10.0, 30.0), (10.0, 31.0)]).is_none());
        assert!(TokenModel::fit(&[(10.0, 30.0), (20.0, 20.0)]).is_none());
        assert_eq!(TokenModel::UNCALIBRATED.words_for_prompt(128), 128);
    }

    #[test]
    fn off_by_more_than_two_percent_or_four_tokens() {
        // 4 tokens for short prompts.
        assert!(!input_length_off(100, 104) && !input_length_off(100, 96));
        assert!(input_length_off(100, 105) && input_length_off(100, 95));
        // 2% above 200 tokens.
        assert!(!input_length_off(1000, 1020) && !input_length_off(1000, 980));
        assert!(input_length_off(1000, 1021) && input_length_off(1000, 979));
        assert!(!input_length_off(0, 0) && input_length_off(0, 5));
    }
}
