//! Label selectors: a port of `k8s.io/apimachinery/pkg/labels/selector.go`.

use std::fmt;

use serde_json::{Map, Value};

use crate::object::go_quote;
use crate::object_names as names;
use crate::status::ApiError;

/// A label selector operator (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelOp {
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`.
    NotIn,
    /// `key=a`.
    Equals,
    /// `key==a`.
    DoubleEquals,
    /// `key!=a`.
    NotEquals,
    /// `key>1`.
    GreaterThan,
    /// `key<1`.
    LessThan,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
}

/// One requirement of a label selector: a key, an operator and its values (sorted, deduplicated,
/// as `sets.String.List()` leaves them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub op: LabelOp,
    /// The values: one for `=`, `==`, `!=`, `>`, `<`; none for exists / does-not-exist.
    pub values: Vec<String>,
}

impl LabelRequirement {
    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// Whether these labels satisfy the requirement (`Requirement.Matches`). A label whose value
    /// is not a JSON string counts as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let lookup = |key: &str| labels.get(key).and_then(Value::as_str);
        match self.op {
            LabelOp::In | LabelOp::Equals | LabelOp::DoubleEquals => {
                lookup(&self.key).is_some_and(|v| self.has_value(v))
            }
            LabelOp::NotIn | LabelOp::NotEquals => {
                lookup(&self.key).is_none_or(|v| !self.has_value(v))
            }
            LabelOp::Exists => lookup(&self.key).is_some(),
            LabelOp::DoesNotExist => lookup(&self.key).is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let Some(have) = lookup(&self.key).and_then(parse_go_int) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Some(want) = parse_go_int(want) else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    /// `Requirement.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == LabelOp::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            LabelOp::Equals => "=",
            LabelOp::DoubleEquals => "==",
            LabelOp::NotEquals => "!=",
            LabelOp::In => " in ",
            LabelOp::NotIn => " notin ",
            LabelOp::GreaterThan => ">",
            LabelOp::LessThan => "<",
            LabelOp::Exists | LabelOp::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.op, LabelOp::In | LabelOp::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed `labelSelector`: the AND of its requirements. No requirements selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parse the `labelSelector` query parameter the way `labels.Parse` does. An empty (or
    /// all-blank) string selects everything. Errors are 400 BadRequest with kube-apiserver's text.
    // The signature is the crate's: `ApiError` is what every handler returns.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser.parse().map_err(|e| ApiError::bad_request(e.to_string()))?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether labels (an object's `metadata.labels`) satisfy every requirement.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`matches`](Self::matches) on an object's `metadata.labels`; missing labels are empty.
    pub fn matches_object(&self, object: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new));
        self.matches(labels)
    }

    /// Whether the selector selects everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }
}

impl fmt::Display for LabelSelector {
    /// `Selector.String()`: the requirements joined with `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The lexer's tokens (`labels.Token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// `labels.Lexer`, byte for byte (a NUL byte reads as the end of the input, as in Go).
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        if self.pos < self.s.len() {
            let b = self.s[self.pos];
            self.pos += 1;
            b
        } else {
            0
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut end;
        loop {
            end = self.pos;
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
        }
        let word = &self.s[start..end];
        let literal = String::from_utf8_lossy(word).into_owned();
        (keyword(word).unwrap_or(Token::Identifier), literal)
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            match keyword(&self.s[start..self.pos]) {
                Some(token) => last = Some((token, self.pos)),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        // Every single special symbol is a token, so `last` is always set when called from `lex`.
        let (token, end) = last.unwrap_or((Token::EndOfString, start));
        (token, String::from_utf8_lossy(&self.s[start..end]).into_owned())
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }
}

/// Whether `in`/`notin` are operators here or plain identifiers (`labels.ParserContext`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// Why a label selector does not parse, in `labels.Parse`'s words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum LabelSelectorError {
    /// A requirement that does not parse, and why.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<LabelSelectorError>),
    /// A token where others were expected.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The token's text.
        found: String,
        /// What was expected, as Go lists it.
        expected: &'static str,
    },
    /// A token where the `(` of a set of values was expected (Go's text has no comma here).
    #[error("found '{0}' expected: '('")]
    NoOpenParenthesis(String),
    /// Invalid keys or values: `field.Invalid` errors, aggregated as
    /// `utilerrors.NewAggregate(errs).Error()` writes them (one as is, several deduplicated in
    /// brackets).
    #[error("{}", aggregate(.0))]
    Invalid(Vec<Invalid>),
}

/// A `field.Invalid` error: `<field>: Invalid value: "<value>": <detail>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: Invalid value: {}: {detail}", go_quote(.value))]
struct Invalid {
    field: String,
    value: String,
    detail: String,
}

impl LabelSelectorError {
    fn unexpected(found: String, expected: &'static str) -> LabelSelectorError {
        LabelSelectorError::Unexpected { found, expected }
    }
}

/// `labels.Parser`.
struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

/// The binary operators, as `labels.binaryOperators` lists them in errors.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer { s: s.as_bytes(), pos: 0 };
        let mut items = Vec::new();
        loop {
            let (token, literal) = lexer.lex();
            items.push((token, literal));
            if token == Token::EndOfString {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, context: Context) -> (Token, String) {
        let (token, literal) =
            self.items.get(index).cloned().unwrap_or((Token::EndOfString, String::new()));
        match token {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, literal),
            _ => (token, literal),
        }
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        self.position += 1;
        self.item(self.position - 1, context)
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, LabelSelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| LabelSelectorError::Requirement(Box::new(e)))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(LabelSelectorError::unexpected(
                                    l2,
                                    "identifier after ','",
                                ));
                            }
                        }
                        _ => {
                            return Err(LabelSelectorError::unexpected(l, "',' or 'end of string'"))
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(LabelSelectorError::unexpected(
                        literal,
                        "!, identifier, or 'end of string'",
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, LabelSelectorError> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (LabelOp::Exists | LabelOp::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn parse_key_and_infer_operator(
        &mut self,
    ) -> Result<(String, Option<LabelOp>), LabelSelectorError> {
        let mut op = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            op = Some(LabelOp::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(LabelSelectorError::unexpected(literal, "identifier"));
        }
        let errs = names::qualified_name(&literal);
        if !errs.is_empty() {
            return Err(LabelSelectorError::Invalid(vec![invalid(
                "<nil>",
                &literal,
                &errs.join("; "),
            )]));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && op != Some(LabelOp::DoesNotExist) {
            op = Some(LabelOp::Exists);
        }
        Ok((literal, op))
    }

    fn parse_operator(&mut self) -> Result<LabelOp, LabelSelectorError> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => LabelOp::In,
            Token::Equals => LabelOp::Equals,
            Token::DoubleEquals => LabelOp::DoubleEquals,
            Token::GreaterThan => LabelOp::GreaterThan,
            Token::LessThan => LabelOp::LessThan,
            Token::NotIn => LabelOp::NotIn,
            Token::NotEquals => LabelOp::NotEquals,
            _ => return Err(LabelSelectorError::unexpected(literal, BINARY_OPERATORS)),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(LabelSelectorError::NoOpenParenthesis(literal));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(LabelSelectorError::unexpected(literal, "')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(LabelSelectorError::unexpected(literal, "',', ')' or identifier")),
        }
    }

    /// A comma-separated, possibly empty list of possibly empty identifiers, as a sorted set.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    set.insert(literal);
                    let (next, next_literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set.into_iter().collect()),
                        _ => {
                            return Err(LabelSelectorError::unexpected(next_literal, "',' or ')'"))
                        }
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set.into_iter().collect());
                    }
                    if next == Token::Comma {
                        set.insert(String::new());
                    }
                }
                _ => return Err(LabelSelectorError::unexpected(literal, "',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(vec![literal])
        } else {
            Err(LabelSelectorError::unexpected(literal, "identifier"))
        }
    }
}

/// `labels.NewRequirement` for what the parser can produce (the key is already validated).
fn new_requirement(
    key: String,
    op: LabelOp,
    values: Vec<String>,
) -> Result<LabelRequirement, LabelSelectorError> {
    let mut errs = Vec::new();
    if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if parse_go_int(v).is_none() {
                errs.push(invalid(
                    &format!("values[{i}]"),
                    v,
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let value_errs = names::label_value(v);
        if !value_errs.is_empty() {
            errs.push(invalid(&format!("values[{i}][{key}]"), v, &value_errs.join("; ")));
        }
    }
    if errs.is_empty() {
        Ok(LabelRequirement { key, op, values })
    } else {
        Err(LabelSelectorError::Invalid(errs))
    }
}

/// `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits, no blanks.
fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A `field.Invalid` error.
fn invalid(field: &str, value: &str, detail: &str) -> Invalid {
    Invalid { field: field.to_owned(), value: value.to_owned(), detail: detail.to_owned() }
}

/// `utilerrors.NewAggregate(errs).Error()`: one error as is, several deduplicated in brackets.
fn aggregate(errs: &[Invalid]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs.iter().map(Invalid::to_string) {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}
