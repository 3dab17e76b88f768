//! Rust source as the tokens the module graph needs: identifiers, `::`, single punctuation and
//! string literals (their text, for `#[path = "…"]`), each with its line. Comments, char
//! literals, lifetimes and numbers are dropped, so a path found in the tokens is code.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(u8),
    Str(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The tokens of `src`. Malformed input (an unterminated string or comment) ends the token
/// stream where it starts; the compiler, not this reader, reports such files.
pub(crate) fn tokens(src: &str) -> Vec<Token> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Counts the newlines a skipped stretch held.
    let lines_in = |from: usize, to: usize| b[from..to.min(b.len())].split(|c| *c == b'\n').count() - 1;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_ascii_whitespace() => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let start = i;
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                line += lines_in(start, i);
            }
            b'"' => {
                let (text, end) = quoted(b, i + 1);
                out.push(Token {
                    tok: Tok::Str(text),
                    line,
                });
                line += lines_in(i, end);
                i = end;
            }
            b'\'' => i = after_quote(b, i),
            c if c.is_ascii_digit() => {
                i += 1;
                while i < b.len()
                    && (is_ident_char(b[i]) || (b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
                {
                    i += 1;
                }
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < b.len() && is_ident_char(b[i]) {
                    i += 1;
                }
                let word = &src[start..i];
                // String prefixes: b"…", c"…", r"…", r#"…"#, br#"…"#, cr"…"; and raw identifiers r#name.
                if matches!(word, "b" | "c") && b.get(i) == Some(&b'"') {
                    let (text, end) = quoted(b, i + 1);
                    out.push(Token {
                        tok: Tok::Str(text),
                        line,
                    });
                    line += lines_in(i, end);
                    i = end;
                } else if matches!(word, "b") && b.get(i) == Some(&b'\'') {
                    i = after_quote(b, i);
                } else if matches!(word, "r" | "br" | "cr") && matches!(b.get(i), Some(b'"' | b'#')) {
                    let hashes = b[i..].iter().take_while(|c| **c == b'#').count();
                    if word == "r" && hashes == 1 && b.get(i + 1).is_some_and(|c| is_ident_start(*c)) {
                        // r#type: the identifier `type`.
                        let s = i + 1;
                        i = s;
                        while i < b.len() && is_ident_char(b[i]) {
                            i += 1;
                        }
                        out.push(Token {
                            tok: Tok::Ident(src[s..i].to_owned()),
                            line,
                        });
                    } else if b.get(i + hashes) == Some(&b'"') {
                        let body = i + hashes + 1;
                        let mut close = vec![b'"'];
                        close.resize(1 + hashes, b'#');
                        let end = b[body..]
                            .windows(close.len())
                            .position(|w| w == close.as_slice())
                            .map_or(b.len(), |p| body + p + close.len());
                        let text =
                            String::from_utf8_lossy(&b[body..end.saturating_sub(close.len()).max(body)])
                                .into_owned();
                        out.push(Token {
                            tok: Tok::Str(text),
                            line,
                        });
                        line += lines_in(i, end);
                        i = end;
                    } else {
                        out.push(Token {
                            tok: Tok::Ident(word.to_owned()),
                            line,
                        });
                    }
                } else {
                    out.push(Token {
                        tok: Tok::Ident(word.to_owned()),
                        line,
                    });
                }
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push(Token {
                    tok: Tok::PathSep,
                    line,
                });
                i += 2;
            }
            c if c.is_ascii() => {
                out.push(Token {
                    tok: Tok::Punct(c),
                    line,
                });
                i += 1;
            }
            // Non-ASCII outside literals and comments: not part of any path we read.
            _ => i += 1,
        }
    }
    out
}

/// A string body starting at `at` (just after the opening quote): its text (escapes kept as
/// written) and the index just after the closing quote.
fn quoted(b: &[u8], at: usize) -> (String, usize) {
    let mut i = at;
    while i < b.len() && b[i] != b'"' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    let text = String::from_utf8_lossy(&b[at..i.min(b.len())]).into_owned();
    (text, (i + 1).min(b.len()))
}

/// Skips a char literal (`'x'`, `'\n'`, `'\u{1F600}'`, `'é'`) or a lifetime (`'a`) at `at`.
fn after_quote(b: &[u8], at: usize) -> usize {
    let next = at + 1;
    if b.get(next) == Some(&b'\\') {
        return b[next + 1..]
            .iter()
            .skip(1)
            .position(|c| *c == b'\'')
            .map_or(b.len(), |p| next + 3 + p);
    }
    // One (possibly multi-byte) char then a quote is a char literal; otherwise a lifetime.
    let width = match b.get(next) {
        Some(c) if *c >= 0xF0 => 4,
        Some(c) if *c >= 0xE0 => 3,
        Some(c) if *c >= 0xC0 => 2,
        _ => 1,
    };
    if b.get(next + width) == Some(&b'\'') {
        return next + width + 1;
    }
    let mut i = next;
    while i < b.len() && is_ident_char(b[i]) {
        i += 1;
    }
    i
}
