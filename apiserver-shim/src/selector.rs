//! Label and field selectors, parsed and evaluated the way kube-apiserver (v1.33) does.
//!
//! * [`LabelSelector`] is a port of `k8s.io/apimachinery/pkg/labels/selector.go`: the same lexer
//!   and recursive-descent parser, the same validation of keys (qualified names) and values, and
//!   the same error texts (`unable to parse requirement: <nil>: Invalid value: …`).
//! * [`FieldSelector`] is a port of `k8s.io/apimachinery/pkg/fields/selector.go`
//!   (`fields.ParseSelector`: `a=b`, `a==b`, `a!=b`, comma-separated, `\,` `\=` `\\` escapes).
//!   Which fields each resource accepts, and what they read from an object, follow the field label
//!   conversion funcs and `ToSelectableFields`/`GetAttrs` of kube-apiserver; see [`field_value`].
//!
//! Pure code: no IO.

use std::fmt;

use serde_json::{Map, Value};

use crate::names;
use crate::object::go_quote;
use crate::status::ApiError;

// ------------------------------------------------------------------------------------------------
// Label selectors
// ------------------------------------------------------------------------------------------------

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
        let mut requirements = parser.parse().map_err(ApiError::bad_request)?;
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

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, String> {
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

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<LabelOp>), String> {
        let mut op = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            op = Some(LabelOp::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errs = names::qualified_name(&literal);
        if !errs.is_empty() {
            return Err(invalid("<nil>", &literal, &errs.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && op != Some(LabelOp::DoesNotExist) {
            op = Some(LabelOp::Exists);
        }
        Ok((literal, op))
    }

    fn parse_operator(&mut self) -> Result<LabelOp, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => LabelOp::In,
            Token::Equals => LabelOp::Equals,
            Token::DoubleEquals => LabelOp::DoubleEquals,
            Token::GreaterThan => LabelOp::GreaterThan,
            Token::LessThan => LabelOp::LessThan,
            Token::NotIn => LabelOp::NotIn,
            Token::NotEquals => LabelOp::NotEquals,
            _ => return Err(format!("found '{literal}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{literal}', expected: ',', ')' or identifier")),
        }
    }

    /// A comma-separated, possibly empty list of possibly empty identifiers, as a sorted set.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
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
                        _ => return Err(format!("found '{next_literal}', expected: ',' or ')'")),
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
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(vec![literal])
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}

/// `labels.NewRequirement` for what the parser can produce (the key is already validated).
fn new_requirement(
    key: String,
    op: LabelOp,
    values: Vec<String>,
) -> Result<LabelRequirement, String> {
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
        Err(aggregate(errs))
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

/// A `field.Invalid` error's text: `<field>: Invalid value: "<value>": <detail>`.
fn invalid(field: &str, value: &str, detail: &str) -> String {
    format!("{field}: Invalid value: {}: {detail}", go_quote(value))
}

/// `utilerrors.NewAggregate(errs).Error()`: one error as is, several deduplicated in brackets.
fn aggregate(errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
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

// ------------------------------------------------------------------------------------------------
// Field selectors
// ------------------------------------------------------------------------------------------------

/// A field selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOp {
    /// `field=value`.
    Equals,
    /// `field==value`.
    DoubleEquals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a field selector. The value is unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field, as the client wrote it (e.g. `spec.nodeName`, `regarding.name`).
    pub field: String,
    /// The operator.
    pub op: FieldOp,
    /// The value the field is compared with.
    pub value: String,
}

/// A parsed `fieldSelector`: the AND of its terms. No terms selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Sorted as `fields.ParseSelector` sorts the raw terms.
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parse `fieldSelector` the way `fields.ParseSelector` does. An empty string selects
    /// everything; empty terms (`a=b,,c=d`) are skipped. Which fields exist is not checked here:
    /// see [`check_supported`](Self::check_supported).
    // The signature is the crate's: `ApiError` is what every handler returns.
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, raw)) = split_term(part) else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(raw).map_err(ApiError::bad_request)?;
            if field.is_empty() && value.is_empty() {
                // ParseSelector's identity Transform turns such a term into Everything().
                continue;
            }
            requirements.push(FieldRequirement { field: field.to_owned(), op, value });
        }
        Ok(FieldSelector { requirements })
    }

    /// Check every field is selectable on this resource, as kube-apiserver's field label
    /// conversion does before listing or watching. The first unsupported field (in sorted term
    /// order) gives a 400 with kube-apiserver's text for that kind, e.g.
    /// `field label not supported: spec.foo` (pods, events, …) or
    /// `"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"`
    /// (kinds with no field label conversion of their own, e.g. configmaps).
    // The signature is the crate's: `ApiError` is what every handler returns.
    pub fn check_supported(&self, group: &str, plural: &str) -> Result<(), ApiError> {
        let kind = Kind::of(group, plural);
        for r in &self.requirements {
            kind.convert(&r.field).map_err(ApiError::bad_request)?;
        }
        Ok(())
    }

    /// Whether an object of this resource satisfies every term. A field this resource does not
    /// select on reads as `""` (as `fields.Set.Get` does); callers should have refused it with
    /// [`check_supported`](Self::check_supported) first.
    pub fn matches(&self, group: &str, plural: &str, object: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let have = field_value(group, plural, object, &r.field).unwrap_or_default();
            match r.op {
                FieldOp::Equals | FieldOp::DoubleEquals => have == r.value,
                FieldOp::NotEquals => have != r.value,
            }
        })
    }

    /// Whether the selector selects everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The name pinned by a `metadata.name=`/`==` term, if any (`RequiresExactMatch`), so callers
    /// can look one object up instead of listing. They must still apply [`matches`](Self::matches)
    /// to it, for the other terms.
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && r.op != FieldOp::NotEquals)
            .map(|r| r.value.as_str())
    }

    /// The terms, in the order `fields.ParseSelector` sorts them.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }
}

impl fmt::Display for FieldSelector {
    /// `Selector.String()`: `field=value` terms (values escaped), joined with `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if r.op == FieldOp::NotEquals { "!=" } else { "=" };
            let value = r.value.replace('\\', r"\\").replace(',', r"\,").replace('=', r"\=");
            write!(f, "{}{op}{value}", r.field)?;
        }
        Ok(())
    }
}

/// `fields.splitTerms`: split on commas not escaped by a backslash (the backslash stays).
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `fields.splitTerm`: split at the first `!=`, `==` or `=`.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (text, op) in
            [("!=", FieldOp::NotEquals), ("==", FieldOp::DoubleEquals), ("=", FieldOp::Equals)]
        {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; a bare `,` or `=` is refused.
fn unescape_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(format!("invalid field selector: invalid escape sequence: \\{c}")),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v, that is as its number.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                ))
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_owned());
    }
    Ok(out)
}

/// Which field label conversion (and selectable field set) a resource has.
///
/// Sources (kubernetes v1.33): `pkg/apis/core/v1/conversion.go` (`addConversionFuncs`: Pod, Node,
/// ReplicationController; `AddFieldLabelConversionsForEvent`, `…ForNamespace`, `…ForSecret`,
/// `…ForService`), `pkg/apis/batch/v1/conversion.go` (Job), `pkg/apis/events/v1/conversion.go`
/// (events.k8s.io Event, mapping `regarding.*` onto the core fields), and for every other kind
/// `runtime.DefaultMetaV1FieldSelectorConversion` (only `metadata.name`, `metadata.namespace`).
/// The values come from the registries' `ToSelectableFields`/`GetAttrs`
/// (`pkg/registry/core/pod/strategy.go` and the like). Notably, `apps/v1` registers no
/// conversion, so `status.replicas` is refused for replicasets even though their registry
/// computes it (kubernetes/kubernetes#135136); batch/v1 CronJobs select on metadata only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Default { cluster_scoped: bool },
    Pod,
    Node,
    ReplicationController,
    CoreEvent,
    Namespace,
    Secret,
    Service,
    Job,
    EventsV1Event,
}

impl Kind {
    fn of(group: &str, plural: &str) -> Kind {
        match (group, plural) {
            ("", "pods") => Kind::Pod,
            ("", "nodes") => Kind::Node,
            ("", "replicationcontrollers") => Kind::ReplicationController,
            ("", "events") => Kind::CoreEvent,
            ("", "namespaces") => Kind::Namespace,
            ("", "secrets") => Kind::Secret,
            ("", "services") => Kind::Service,
            ("batch", "jobs") => Kind::Job,
            ("events.k8s.io", "events") => Kind::EventsV1Event,
            _ => Kind::Default {
                cluster_scoped: crate::resource::BUILT_IN
                    .iter()
                    .any(|t| t.group == group && t.plural == plural && !t.namespaced),
            },
        }
    }

    /// The kind's field label conversion: the field as the selectable field set names it, or
    /// kube-apiserver's error text.
    fn convert(self, label: &str) -> Result<&str, String> {
        let meta = matches!(label, "metadata.name" | "metadata.namespace");
        let accepted = match self {
            Kind::Default { .. } => {
                return if meta {
                    Ok(label)
                } else {
                    Err(format!(
                        "{} is not a known field selector: only {:?}, {:?}",
                        go_quote(label),
                        "metadata.name",
                        "metadata.namespace"
                    ))
                };
            }
            Kind::Job => {
                return if meta || label == "status.successful" {
                    Ok(label)
                } else {
                    Err(format!("field label {} not supported for batchv1.Job", go_quote(label)))
                };
            }
            Kind::Pod => {
                if label == "spec.host" {
                    // Old v1 clients' name for spec.nodeName.
                    return Ok("spec.nodeName");
                }
                meta || matches!(
                    label,
                    "spec.nodeName"
                        | "spec.restartPolicy"
                        | "spec.schedulerName"
                        | "spec.serviceAccountName"
                        | "spec.hostNetwork"
                        | "status.phase"
                        | "status.podIP"
                        | "status.podIPs"
                        | "status.nominatedNodeName"
                )
            }
            Kind::Node => matches!(label, "metadata.name" | "spec.unschedulable"),
            Kind::ReplicationController => meta || label == "status.replicas",
            Kind::CoreEvent => {
                meta || matches!(
                    label,
                    "involvedObject.kind"
                        | "involvedObject.namespace"
                        | "involvedObject.name"
                        | "involvedObject.uid"
                        | "involvedObject.apiVersion"
                        | "involvedObject.resourceVersion"
                        | "involvedObject.fieldPath"
                        | "reason"
                        | "reportingComponent"
                        | "source"
                        | "type"
                )
            }
            Kind::Namespace => matches!(label, "metadata.name" | "status.phase"),
            Kind::Secret => meta || label == "type",
            Kind::Service => meta || matches!(label, "spec.clusterIP" | "spec.type"),
            Kind::EventsV1Event => {
                let mapped = match label {
                    "regarding.kind" => "involvedObject.kind",
                    "regarding.namespace" => "involvedObject.namespace",
                    "regarding.name" => "involvedObject.name",
                    "regarding.uid" => "involvedObject.uid",
                    "regarding.apiVersion" => "involvedObject.apiVersion",
                    "regarding.resourceVersion" => "involvedObject.resourceVersion",
                    "regarding.fieldPath" => "involvedObject.fieldPath",
                    "reportingController" => "reportingComponent",
                    "reason" | "source" | "type" | "metadata.name" | "metadata.namespace" => label,
                    _ => return Err(format!("field label not supported: {label}")),
                };
                return Ok(mapped);
            }
        };
        if accepted {
            Ok(label)
        } else {
            Err(format!("field label not supported: {label}"))
        }
    }

    /// The value of a (converted) field in the kind's selectable field set; `""` for a field the
    /// set lacks, as `fields.Set.Get` answers.
    fn value(self, object: &Value, field: &str) -> String {
        let text = |pointer: &str| str_at(object, pointer).to_owned();
        match (self, field) {
            (_, "metadata.name") => text("/metadata/name"),
            (Kind::Default { cluster_scoped: true }, "metadata.namespace") => String::new(),
            (_, "metadata.namespace") => text("/metadata/namespace"),

            (Kind::Pod, "spec.nodeName") => text("/spec/nodeName"),
            (Kind::Pod, "spec.restartPolicy") => or_default(text("/spec/restartPolicy"), "Always"),
            (Kind::Pod, "spec.schedulerName") => {
                or_default(text("/spec/schedulerName"), "default-scheduler")
            }
            (Kind::Pod, "spec.serviceAccountName") => text("/spec/serviceAccountName"),
            (Kind::Pod, "spec.hostNetwork") => bool_at(object, "/spec/hostNetwork").to_string(),
            (Kind::Pod, "status.phase") => text("/status/phase"),
            (Kind::Pod, "status.podIP") => {
                // v1 -> internal conversion: podIP wins when set, else podIPs[0].
                let ip = text("/status/podIP");
                if ip.is_empty() {
                    text("/status/podIPs/0/ip")
                } else {
                    ip
                }
            }
            (Kind::Pod, "status.nominatedNodeName") => text("/status/nominatedNodeName"),

            (Kind::Node, "spec.unschedulable") => {
                bool_at(object, "/spec/unschedulable").to_string()
            }
            (Kind::ReplicationController, "status.replicas") => int_at(object, "/status/replicas"),
            (Kind::Job, "status.successful") => int_at(object, "/status/succeeded"),
            (Kind::Namespace, "status.phase") => or_default(text("/status/phase"), "Active"),
            (Kind::Secret, "type") => or_default(text("/type"), "Opaque"),
            (Kind::Service, "spec.clusterIP") => text("/spec/clusterIP"),
            (Kind::Service, "spec.type") => or_default(text("/spec/type"), "ClusterIP"),

            (Kind::CoreEvent, _) => event_value(
                object,
                field,
                "involvedObject",
                "source/component",
                "reportingComponent",
            ),
            (Kind::EventsV1Event, _) => event_value(
                object,
                field,
                "regarding",
                "deprecatedSource/component",
                "reportingController",
            ),

            // Accepted by the conversion but absent from the field set (e.g. status.podIPs).
            _ => String::new(),
        }
    }
}

/// An event's selectable field, from a core/v1 or an events.k8s.io/v1 object.
fn event_value(
    object: &Value,
    field: &str,
    reference: &str,
    source_component: &str,
    reporting: &str,
) -> String {
    let text = |pointer: String| str_at(object, &pointer).to_owned();
    if let Some(sub) = field.strip_prefix("involvedObject.") {
        return text(format!("/{reference}/{sub}"));
    }
    match field {
        "reason" => text("/reason".to_owned()),
        "type" => text("/type".to_owned()),
        "reportingComponent" => text(format!("/{reporting}")),
        "source" => or_default(
            text(format!("/{source_component}")),
            str_at(object, &format!("/{reporting}")),
        ),
        _ => String::new(),
    }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn bool_at(object: &Value, pointer: &str) -> bool {
    object.pointer(pointer).and_then(Value::as_bool).unwrap_or(false)
}

fn int_at(object: &Value, pointer: &str) -> String {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0).to_string()
}

fn or_default(value: String, default: &str) -> String {
    if value.is_empty() {
        default.to_owned()
    } else {
        value
    }
}

/// The value of a selectable field of an object of this resource, as kube-apiserver compares it:
/// a string, booleans as `"true"`/`"false"`, integers in decimal, missing fields as `""` — except
/// that fields the API always defaults read as their default when missing (pods'
/// `spec.restartPolicy` `Always` and `spec.schedulerName` `default-scheduler`, secrets' `type`
/// `Opaque`, services' `spec.type` `ClusterIP`, namespaces' `status.phase` `Active`).
///
/// `field` is named as a client writes it in `fieldSelector` (`spec.host` on pods, `regarding.*`
/// and `reportingController` on events.k8s.io events). `None` if the resource does not accept
/// the field; the table and its sources are on the private `Kind` enum in this module. Every
/// resource accepts `metadata.name`; every one but nodes and namespaces accepts
/// `metadata.namespace` (`""` on cluster-scoped objects).
pub fn field_value(group: &str, plural: &str, object: &Value, field: &str) -> Option<String> {
    let kind = Kind::of(group, plural);
    let converted = kind.convert(field).ok()?;
    Some(kind.value(object, converted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME_PART_ERR: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_selectors_parse() {
        // (input, the selector as Go's String() writes it)
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("   \t", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("x=", "x="),
            ("x=,z= ", "x=,z="),
            (" x = a , y != b ", "x=a,y!=b"),
            ("b=1,a=2", "a=2,b=1"),
            ("x", "x"),
            ("!x", "!x"),
            ("! x", "!x"),
            ("x,!y", "x,!y"),
            ("x in (a,b)", "x in (a,b)"),
            ("x in (b, a, b)", "x in (a,b)"),
            ("x notin (a)", "x notin (a)"),
            ("x in ()", "x in ()"),
            ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,)", "x in (,a)"),
            ("x>1", "x>1"),
            ("x<1", "x<1"),
            ("x > 10", "x>10"),
            ("in in (in, notin)", "in in (in,notin)"),
            ("notin=in", "notin=in"),
            ("example.com/app=web", "example.com/app=web"),
            ("a.b-c_d=E.f-G_h", "a.b-c_d=E.f-G_h"),
        ];
        for (input, want) in cases {
            let got = LabelSelector::parse(input)
                .unwrap_or_else(|e| panic!("{input:?} should parse, got {e}"));
            assert_eq!(got.to_string(), *want, "{input:?}");
            assert_eq!(got.is_everything(), want.is_empty(), "{input:?}");
        }
    }

    #[test]
    fn label_selectors_refused_with_kube_apiserver_messages() {
        let long_value = "v".repeat(64);
        let long_name = "n".repeat(64);
        let cases: Vec<(&str, String)> = vec![
            (",", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("x,", "found '', expected: identifier after ','".into()),
            ("x,,y", "found ',', expected: identifier after ','".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("x=a)", "found ')', expected: ',' or 'end of string'".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("x!", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
            ("x in (a,", "unable to parse requirement: found '', expected: ',', or identifier".into()),
            ("x in (", "unable to parse requirement: found '', expected: ',', ')' or identifier".into()),
            ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
            ("x==(", "unable to parse requirement: found '(', expected: identifier".into()),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("!=a", "found '!=', expected: !, identifier, or 'end of string'".into()),
            (
                "x<-1",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"-1\": {VALUE_ERR}"),
            ),
            (
                "app:web",
                format!("unable to parse requirement: <nil>: Invalid value: \"app:web\": {NAME_PART_ERR}"),
            ),
            (
                "-x=a",
                format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {NAME_PART_ERR}"),
            ),
            (
                "a/b/c=d",
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
            ),
            (
                "/a",
                "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty".into(),
            ),
            (
                "Example.com/a",
                "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
            ),
            (
                "example.com/",
                format!("unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; {NAME_PART_ERR}"),
            ),
            (
                &long_name,
                format!("unable to parse requirement: <nil>: Invalid value: \"{long_name}\": name part must be no more than 63 characters"),
            ),
            (
                "x=a_",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"a_\": {VALUE_ERR}"),
            ),
            (
                "x in (ok, b/c)",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"b/c\": {VALUE_ERR}"),
            ),
            (
                "x in (_a, b_)",
                format!("unable to parse requirement: [values[0][x]: Invalid value: \"_a\": {VALUE_ERR}, values[1][x]: Invalid value: \"b_\": {VALUE_ERR}]"),
            ),
            (
                "x=\u{e9}",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"\u{e9}\": {VALUE_ERR}"),
            ),
            (
                "x=\"",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"\\\"\": {VALUE_ERR}"),
            ),
            (
                "x>abc",
                "unable to parse requirement: values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x<",
                "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x>1/0",
                format!("unable to parse requirement: [values[0]: Invalid value: \"1/0\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"1/0\": {VALUE_ERR}]"),
            ),
            (
                "x>1_0",
                "unable to parse requirement: values[0]: Invalid value: \"1_0\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
        ];
        let long_value_case = format!("x={long_value}");
        let mut cases = cases;
        cases.push((
            &long_value_case,
            format!("unable to parse requirement: values[0][x]: Invalid value: \"{long_value}\": must be no more than 63 characters"),
        ));
        for (input, want) in &cases {
            let err = LabelSelector::parse(input).expect_err(input);
            assert_eq!(err.code, 400, "{input:?}");
            assert_eq!(err.reason, "BadRequest", "{input:?}");
            assert_eq!(&err.message, want, "{input:?}");
        }
    }

    #[test]
    fn label_selectors_match() {
        let set = json!({"app": "web", "tier": "front", "empty": "", "n": "5", "junk": "x1"});
        // (selector, matches `set`)
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("missing=web", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=web", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (web)", false),
            ("missing in ()", false),
            ("empty in ()", true),
            ("empty=", true),
            ("missing=", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("app", true),
            ("empty", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("n<5", false),
            ("n>0", true),
            ("missing>1", false),
            ("missing<1", false),
            ("junk>1", false),
            ("junk<1", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("app=web,!tier", false),
        ];
        let set = labels(set);
        for (selector, want) in cases {
            let s = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(s.matches(&set), *want, "{selector:?}");
        }
    }

    #[test]
    fn label_selectors_read_metadata_labels() {
        let cases: &[(&str, Value, bool)] = &[
            ("app=web", json!({"metadata": {"labels": {"app": "web"}}}), true),
            ("app=web", json!({"metadata": {}}), false),
            ("!app", json!({"metadata": {}}), true),
            ("app!=web", json!({}), true),
            ("app", json!({"metadata": {"labels": null}}), false),
            ("", json!(null), true),
            // A non-string label value counts as absent.
            ("app", json!({"metadata": {"labels": {"app": 1}}}), false),
        ];
        for (selector, object, want) in cases {
            let s = LabelSelector::parse(selector).unwrap();
            assert_eq!(s.matches_object(object), *want, "{selector:?} on {object}");
        }
    }

    #[test]
    fn field_selectors_parse() {
        // (input, terms as (field, op, value), in ParseSelector's sorted order)
        type Terms = &'static [(&'static str, FieldOp, &'static str)];
        let cases: &[(&str, Terms)] = &[
            ("", &[]),
            (",", &[]),
            ("a=b,,", &[("a", FieldOp::Equals, "b")]),
            ("metadata.name=x", &[("metadata.name", FieldOp::Equals, "x")]),
            ("metadata.name==x", &[("metadata.name", FieldOp::DoubleEquals, "x")]),
            ("metadata.name!=x", &[("metadata.name", FieldOp::NotEquals, "x")]),
            ("spec.nodeName=", &[("spec.nodeName", FieldOp::Equals, "")]),
            ("z=1,a!=2", &[("a", FieldOp::NotEquals, "2"), ("z", FieldOp::Equals, "1")]),
            (r"a=x\,y", &[("a", FieldOp::Equals, "x,y")]),
            (r"a=x\=y", &[("a", FieldOp::Equals, "x=y")]),
            (r"a=x\\y", &[("a", FieldOp::Equals, r"x\y")]),
            (r"a=x\\,b=y", &[("a", FieldOp::Equals, r"x\"), ("b", FieldOp::Equals, "y")]),
            ("a==", &[("a", FieldOp::DoubleEquals, "")]),
            ("=", &[]),
            ("!=,a=b", &[("a", FieldOp::Equals, "b")]),
            ("=x", &[("", FieldOp::Equals, "x")]),
            (" a = b ", &[(" a ", FieldOp::Equals, " b ")]),
            ("a=\u{e9}t\u{e9}", &[("a", FieldOp::Equals, "\u{e9}t\u{e9}")]),
        ];
        for (input, want) in cases {
            let got = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            let got: Vec<(&str, FieldOp, &str)> = got
                .requirements()
                .iter()
                .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
                .collect();
            assert_eq!(got, *want, "{input:?}");
        }
    }

    #[test]
    fn field_selectors_refused() {
        let cases: &[(&str, &str)] = &[
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (" ", "invalid selector: ' '; can't understand ' '"),
            ("a=b=c", "invalid field selector: unescaped character in value: 61"),
            ("a==b=c", "invalid field selector: unescaped character in value: 61"),
            (r"a=b\,c,d=\x", r"invalid field selector: invalid escape sequence: \x"),
            (r"a=b\", r"invalid field selector: invalid escape sequence: \"),
        ];
        for (input, want) in cases {
            let err = FieldSelector::parse(input).expect_err(input);
            assert_eq!(err.code, 400, "{input:?}");
            assert_eq!(err.message, *want, "{input:?}");
        }
    }

    #[test]
    fn field_selectors_checked_per_resource() {
        // (group, plural, selector, None if supported else the message)
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            ("", "pods", "spec.nodeName=n,status.phase=Running", None),
            ("", "pods", "spec.host=n,status.podIPs=x,spec.hostNetwork=true", None),
            ("", "pods", "metadata.namespace=d,metadata.name=p", None),
            ("", "pods", "spec.foo=x", Some("field label not supported: spec.foo")),
            ("", "pods", "a=1,spec.bar=1", Some("field label not supported: a")),
            ("", "pods", "=x", Some("field label not supported: ")),
            ("", "nodes", "spec.unschedulable=false,metadata.name=n", None),
            ("", "nodes", "metadata.namespace=", Some("field label not supported: metadata.namespace")),
            ("", "namespaces", "status.phase=Active", None),
            ("", "namespaces", "metadata.namespace=x", Some("field label not supported: metadata.namespace")),
            ("", "secrets", "type=Opaque", None),
            ("", "secrets", "data=x", Some("field label not supported: data")),
            ("", "services", "spec.type=ClusterIP,spec.clusterIP=None", None),
            ("", "replicationcontrollers", "status.replicas=0", None),
            ("", "events", "involvedObject.kind=Pod,involvedObject.uid=u,reason=R,source=s,type=Normal,reportingComponent=c", None),
            ("", "events", "regarding.kind=Pod", Some("field label not supported: regarding.kind")),
            ("events.k8s.io", "events", "regarding.kind=Pod,regarding.name=p,reportingController=c,reason=R,type=Normal,source=s", None),
            ("events.k8s.io", "events", "involvedObject.kind=Pod", Some("field label not supported: involvedObject.kind")),
            ("events.k8s.io", "events", "reportingComponent=c", Some("field label not supported: reportingComponent")),
            ("batch", "jobs", "status.successful=1", None),
            ("batch", "jobs", "status.failed=1", Some("field label \"status.failed\" not supported for batchv1.Job")),
            ("", "configmaps", "metadata.name=a,metadata.namespace=b", None),
            ("", "configmaps", "data.x=1", Some("\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("apps", "replicasets", "status.replicas=0", Some("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("apps", "deployments", "spec.replicas=1", Some("\"spec.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("batch", "cronjobs", "status.successful=1", Some("\"status.successful\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("", "persistentvolumeclaims", "spec.volumeName=v", Some("\"spec.volumeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("rbac.authorization.k8s.io", "clusterroles", "metadata.namespace=", None),
            ("example.com", "widgets", "metadata.name=w", None),
            ("", "pods", "", None),
        ];
        for (group, plural, selector, want) in cases {
            let s = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            match (s.check_supported(group, plural), want) {
                (Ok(()), None) => {}
                (Err(e), Some(msg)) => {
                    assert_eq!(e.code, 400);
                    assert_eq!(e.reason, "BadRequest");
                    assert_eq!(e.message, *msg, "{group}/{plural} {selector:?}");
                }
                (got, _) => panic!("{group}/{plural} {selector:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn field_selectors_match_objects() {
        let scheduled = json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "node-a", "hostNetwork": true, "serviceAccountName": "sa"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}]},
        });
        let pending = json!({
            "metadata": {"name": "web-2", "namespace": "default"},
            "spec": {"restartPolicy": "Never"},
            "status": {"phase": "Pending"},
        });
        let core_event = json!({
            "metadata": {"name": "web-1.17a", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1", "uid": "u-1", "apiVersion": "v1", "fieldPath": "spec.containers{app}"},
            "reason": "Scheduled", "type": "Normal", "reportingComponent": "default-scheduler",
        });
        let v1_event = json!({
            "metadata": {"name": "web-1.17a", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "web-1", "uid": "u-1"},
            "reason": "Pulled", "type": "Normal", "reportingController": "kubelet",
            "deprecatedSource": {"component": "kubelet-old"},
        });
        let node = json!({"metadata": {"name": "node-a"}, "spec": {"unschedulable": true}});
        let namespace = json!({"metadata": {"name": "kube-system"}, "status": {}});
        let secret = json!({"metadata": {"name": "s", "namespace": "d"}});
        let token = json!({"metadata": {"name": "t", "namespace": "d"}, "type": "kubernetes.io/service-account-token"});
        let rc = json!({"metadata": {"name": "rc", "namespace": "d"}, "status": {"replicas": 3}});
        let job = json!({"metadata": {"name": "j", "namespace": "d"}, "status": {"succeeded": 1}});
        let service =
            json!({"metadata": {"name": "svc", "namespace": "d"}, "spec": {"clusterIP": "None"}});
        let cluster_role = json!({"metadata": {"name": "admin"}});
        let configmap = json!({"metadata": {"name": "cm", "namespace": "d"}});

        // (group, plural, selector, object, matches)
        let cases: &[(&str, &str, &str, &Value, bool)] = &[
            ("", "pods", "", &pending, true),
            ("", "pods", "spec.nodeName=", &pending, true),
            ("", "pods", "spec.nodeName=", &scheduled, false),
            ("", "pods", "spec.nodeName!=", &scheduled, true),
            ("", "pods", "spec.nodeName=node-a", &scheduled, true),
            ("", "pods", "spec.host=node-a", &scheduled, true),
            ("", "pods", "spec.nodeName==node-b", &scheduled, false),
            ("", "pods", "status.phase=Running", &scheduled, true),
            ("", "pods", "status.phase!=Running", &pending, true),
            ("", "pods", "status.phase!=Succeeded,status.phase!=Failed", &pending, true),
            ("", "pods", "spec.hostNetwork=true", &scheduled, true),
            ("", "pods", "spec.hostNetwork=false", &pending, true),
            ("", "pods", "spec.restartPolicy=Always", &scheduled, true),
            ("", "pods", "spec.restartPolicy=Never", &pending, true),
            ("", "pods", "spec.schedulerName=default-scheduler", &pending, true),
            ("", "pods", "spec.serviceAccountName=sa", &scheduled, true),
            ("", "pods", "status.podIP=10.0.0.7", &scheduled, true),
            ("", "pods", "status.podIP=", &pending, true),
            ("", "pods", "status.podIPs=10.0.0.7", &scheduled, false),
            ("", "pods", "status.podIPs=", &scheduled, true),
            ("", "pods", "status.nominatedNodeName=", &scheduled, true),
            ("", "pods", "metadata.name=web-1", &scheduled, true),
            ("", "pods", "metadata.name=web-1", &pending, false),
            ("", "pods", "metadata.name=web-1,metadata.namespace=default", &scheduled, true),
            ("", "pods", "metadata.namespace=other", &scheduled, false),
            ("", "events", "involvedObject.kind=Pod,involvedObject.name=web-1", &core_event, true),
            ("", "events", "involvedObject.name=web-2", &core_event, false),
            (
                "",
                "events",
                "involvedObject.uid=u-1,involvedObject.apiVersion=v1",
                &core_event,
                true,
            ),
            ("", "events", r"involvedObject.fieldPath=spec.containers{app}", &core_event, true),
            ("", "events", "involvedObject.resourceVersion=", &core_event, true),
            ("", "events", "involvedObject.namespace=default", &core_event, true),
            ("", "events", "reason=Scheduled,type=Normal", &core_event, true),
            ("", "events", "type!=Warning", &core_event, true),
            ("", "events", "reportingComponent=default-scheduler", &core_event, true),
            ("", "events", "source=default-scheduler", &core_event, true),
            ("events.k8s.io", "events", "regarding.kind=Pod,regarding.name=web-1", &v1_event, true),
            ("events.k8s.io", "events", "regarding.uid=u-2", &v1_event, false),
            ("events.k8s.io", "events", "reportingController=kubelet", &v1_event, true),
            ("events.k8s.io", "events", "source=kubelet-old", &v1_event, true),
            ("events.k8s.io", "events", "reason=Pulled,type=Normal", &v1_event, true),
            ("", "nodes", "spec.unschedulable=true", &node, true),
            ("", "nodes", "spec.unschedulable=false", &node, false),
            ("", "nodes", "metadata.name=node-a", &node, true),
            ("", "namespaces", "status.phase=Active", &namespace, true),
            ("", "secrets", "type=Opaque", &secret, true),
            ("", "secrets", "type=Opaque", &token, false),
            ("", "secrets", r"type!=kubernetes.io/service-account-token", &token, false),
            ("", "replicationcontrollers", "status.replicas=3", &rc, true),
            ("", "replicationcontrollers", "status.replicas=0", &rc, false),
            ("batch", "jobs", "status.successful=1", &job, true),
            ("batch", "jobs", "status.successful=0", &configmap, true),
            ("", "services", "spec.clusterIP=None,spec.type=ClusterIP", &service, true),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "metadata.namespace=",
                &cluster_role,
                true,
            ),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "metadata.namespace=x",
                &cluster_role,
                false,
            ),
            ("", "configmaps", "metadata.name=cm,metadata.namespace=d", &configmap, true),
            // Unsupported fields read as "" (callers refuse them first with check_supported).
            ("", "configmaps", "data.x=1", &configmap, false),
            ("", "configmaps", "data.x!=1", &configmap, true),
        ];
        for (group, plural, selector, object, want) in cases {
            let s = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(s.matches(group, plural, object), *want, "{group}/{plural} {selector:?}");
        }
    }

    #[test]
    fn field_values() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"hostNetwork": false},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]},
        });
        let cases: &[(&str, &str, &Value, &str, Option<&str>)] = &[
            ("", "pods", &pod, "metadata.name", Some("p")),
            ("", "pods", &pod, "spec.nodeName", Some("")),
            ("", "pods", &pod, "spec.hostNetwork", Some("false")),
            ("", "pods", &pod, "status.podIP", Some("10.0.0.1")),
            ("", "pods", &pod, "status.podIPs", Some("")),
            ("", "pods", &pod, "spec.containers", None),
            ("", "nodes", &pod, "metadata.namespace", None),
            ("", "nodes", &pod, "spec.unschedulable", Some("false")),
            ("", "replicationcontrollers", &pod, "status.replicas", Some("0")),
            ("apps", "replicasets", &pod, "status.replicas", None),
            ("", "namespaces", &pod, "metadata.name", Some("p")),
            ("", "persistentvolumes", &pod, "metadata.namespace", Some("")),
            ("", "configmaps", &pod, "metadata.namespace", Some("d")),
        ];
        for (group, plural, object, field, want) in cases {
            assert_eq!(
                field_value(group, plural, object, field).as_deref(),
                *want,
                "{group}/{plural} {field}"
            );
        }
    }

    #[test]
    fn exact_names() {
        let cases: &[(&str, Option<&str>)] = &[
            ("", None),
            ("metadata.name=web", Some("web")),
            ("metadata.name==web", Some("web")),
            ("metadata.name=", Some("")),
            ("metadata.name!=web", None),
            ("metadata.namespace=d,metadata.name=web", Some("web")),
            (r"metadata.name=a\,b", Some("a,b")),
            ("spec.nodeName=web", None),
        ];
        for (selector, want) in cases {
            let s = FieldSelector::parse(selector).unwrap();
            assert_eq!(s.exact_name(), *want, "{selector:?}");
        }
    }

    #[test]
    fn field_selectors_display_like_go() {
        let s = FieldSelector::parse(r"b!=2,a==x\,y").unwrap();
        assert_eq!(s.to_string(), r"a=x\,y,b!=2");
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}\u{e9}"), "\"a\\\"b\\\\c\\n\\x01\u{e9}\"");
    }
}
