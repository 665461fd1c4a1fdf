//! The functions every rule may call beyond CEL's standard library: kube-apiserver's extensions,
//! and `size()` and `matches()` as Kubernetes defines them.

use super::*;

fn size(ftx: &FunctionContext<'_>, This(this): This<Cel>) -> Result<i64, ExecutionError> {
    let n = match this {
        Cel::String(s) => s.chars().count(),
        Cel::List(l) => l.len(),
        Cel::Map(m) => m.map.len(),
        Cel::Bytes(b) => b.len(),
        other => return Err(ftx.error(format!("no such overload: size({:?})", other.type_of()))),
    };
    Ok(n as i64)
}

fn matches_re(
    ftx: &FunctionContext<'_>,
    This(this): This<Arc<String>>,
    re: Arc<String>,
) -> Result<bool, ExecutionError> {
    match crate::regex_go::compile_new(&re) {
        Ok(r) => Ok(r.is_match(&this)),
        Err(e) => Err(ftx.error(e)),
    }
}

fn lower_ascii(This(this): This<Arc<String>>) -> String {
    this.to_ascii_lowercase()
}

fn upper_ascii(This(this): This<Arc<String>>) -> String {
    this.to_ascii_uppercase()
}

fn trim(This(this): This<Arc<String>>) -> String {
    this.trim().to_string()
}

fn split(This(this): This<Arc<String>>, sep: Arc<String>) -> Arc<Vec<Cel>> {
    Arc::new(this.split(sep.as_str()).map(|p| Cel::String(Arc::new(p.to_string()))).collect())
}

fn join(
    ftx: &FunctionContext<'_>,
    This(this): This<Arc<Vec<Cel>>>,
    Arguments(args): Arguments,
) -> Result<Cel, ExecutionError> {
    let sep = match args.first() {
        Some(Cel::String(s)) => s.to_string(),
        Some(_) => return Err(ftx.error("no such overload")),
        None => String::new(),
    };
    let mut parts = Vec::with_capacity(this.len());
    for v in this.iter() {
        match v {
            Cel::String(s) => parts.push(s.to_string()),
            _ => return Err(ftx.error("no such overload")),
        }
    }
    Ok(Cel::String(Arc::new(parts.join(&sep))))
}

fn char_index(hay: &str, byte: Option<usize>) -> i64 {
    match byte {
        Some(b) => hay[..b].chars().count() as i64,
        None => -1,
    }
}

fn index_of(This(this): This<Arc<String>>, sub: Arc<String>) -> i64 {
    char_index(&this, this.find(sub.as_str()))
}

fn last_index_of(This(this): This<Arc<String>>, sub: Arc<String>) -> i64 {
    char_index(&this, this.rfind(sub.as_str()))
}

fn replace(This(this): This<Arc<String>>, from: Arc<String>, to: Arc<String>) -> String {
    this.replace(from.as_str(), to.as_str())
}

fn is_sorted(
    ftx: &FunctionContext<'_>,
    This(this): This<Arc<Vec<Cel>>>,
) -> Result<bool, ExecutionError> {
    for w in this.windows(2) {
        match w[0].partial_cmp(&w[1]) {
            Some(std::cmp::Ordering::Greater) => return Ok(false),
            Some(_) => {}
            None => return Err(ftx.error("no such overload")),
        }
    }
    Ok(true)
}

fn sum(ftx: &FunctionContext<'_>, This(this): This<Arc<Vec<Cel>>>) -> Result<Cel, ExecutionError> {
    let mut acc = match this.first() {
        Some(Cel::Float(_)) => Cel::Float(0.0),
        Some(Cel::UInt(_)) => Cel::UInt(0),
        _ => Cel::Int(0),
    };
    for v in this.iter() {
        acc = match (acc, v) {
            (Cel::Int(a), Cel::Int(b)) => {
                Cel::Int(a.checked_add(*b).ok_or_else(|| ftx.error("integer overflow"))?)
            }
            (Cel::UInt(a), Cel::UInt(b)) => {
                Cel::UInt(a.checked_add(*b).ok_or_else(|| ftx.error("integer overflow"))?)
            }
            (Cel::Float(a), Cel::Float(b)) => Cel::Float(a + b),
            _ => return Err(ftx.error("no such overload")),
        };
    }
    Ok(acc)
}

/// The context every rule runs in: the standard library and kube-apiserver's extensions.
pub(super) fn base_context() -> Context<'static> {
    let mut ctx = Context::default();
    ctx.add_function("size", size);
    ctx.add_function("matches", matches_re);
    ctx.add_function("lowerAscii", lower_ascii);
    ctx.add_function("upperAscii", upper_ascii);
    ctx.add_function("trim", trim);
    ctx.add_function("split", split);
    ctx.add_function("join", join);
    ctx.add_function("indexOf", index_of);
    ctx.add_function("lastIndexOf", last_index_of);
    ctx.add_function("replace", replace);
    ctx.add_function("isSorted", is_sorted);
    ctx.add_function("sum", sum);
    ctx
}
