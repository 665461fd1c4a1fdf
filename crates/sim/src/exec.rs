//! What a simulated container runs when a client execs into it: a small set of built-in
//! commands, interpreted here, without ever starting a process on the machine.
//!
//! `sh -c SCRIPT` (also `bash`, `/bin/sh`) runs commands separated by `;`, `&&`, `||` or new
//! lines, with single and double quotes and `$NAME`, `${NAME}` and `$?`; a bare `sh` reads such
//! lines from standard input. The commands: `echo [-n]`, `cat` (standard input, or the files of
//! the container's [`Files`]), `ls`, `env`, `printenv [NAME]`, `hostname`, `pwd`, `sleep N`,
//! `true`, `false`, `exit [N]`, `test -d|-f|-e`, `tar` (`cf -` and `xf -`, for `kubectl cp`)
//! and `nvidia-smi -L`, which lists the MIG devices pinned to the pod. Anything else fails as it would in a container without it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// A container's files, by absolute path. Cheap to clone: clones share the files.
#[derive(Clone, Debug, Default)]
pub struct Files(Arc<Mutex<BTreeMap<String, Vec<u8>>>>);

impl Files {
    /// The contents of `path`.
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        self.0.lock().get(path).cloned()
    }

    /// Write `path`.
    pub fn write(&self, path: &str, contents: Vec<u8>) {
        self.0.lock().insert(path.to_owned(), contents);
    }

    /// The names directly under directory `dir`, sorted, with `true` for a directory.
    pub fn list(&self, dir: &str) -> Vec<(String, bool)> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut names: Vec<(String, bool)> = Vec::new();
        for path in self.0.lock().keys() {
            let Some(rest) = path.strip_prefix(&prefix) else { continue };
            let (name, is_dir) = match rest.split_once('/') {
                Some((dir, _)) => (dir, true),
                None => (rest, false),
            };
            if names.last().is_none_or(|(last, _)| last != name) {
                names.push((name.to_owned(), is_dir));
            }
        }
        names
    }
}

/// A GPU device the container sees, as `nvidia-smi -L` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// The physical GPU's product name (`NVIDIA H200`).
    pub gpu_name: String,
    /// The physical GPU's UUID (`GPU-…`).
    pub gpu_uuid: String,
    /// The MIG profile (`1g.18gb`).
    pub profile: String,
    /// The MIG device's UUID (`MIG-…`).
    pub uuid: String,
}

/// What an exec'd command sees of its container.
#[derive(Clone, Debug, Default)]
pub struct Container {
    /// The host name (the pod's).
    pub hostname: String,
    /// The environment, in order.
    pub env: Vec<(String, String)>,
    /// The GPU devices pinned to the pod.
    pub devices: Vec<Device>,
    /// Its files.
    pub files: Files,
}

/// How long `stty size` waits for a terminal's first size.
const FIRST_SIZE: Duration = Duration::from_secs(1);

/// How a command ended: its exit code, or a failure to start it at all (the container runtime's
/// words).
pub type Outcome = Result<i32, String>;

/// The streams of one exec.
#[derive(Debug)]
pub struct Io<R, O, E> {
    /// Standard input (`None`: none attached).
    pub stdin: Option<R>,
    /// Standard output.
    pub stdout: O,
    /// Standard error.
    pub stderr: E,
    /// Whether there is a terminal (output lines end in `\r\n`, input is echoed).
    pub tty: bool,
    /// The terminal's sizes as the client resizes it, (width, height) in characters.
    pub sizes: Option<tokio::sync::mpsc::Receiver<(u16, u16)>>,
}

/// Run `argv` in `container`.
pub async fn run<R, O, E>(container: &Container, argv: &[String], io: Io<R, O, E>) -> Outcome
where
    R: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    let mut shell = Shell { container, io, status: 0, size: None };
    let Some(program) = argv.first() else { return Err("no command".to_owned()) };
    let code = match (base_name(program), argv.get(1).map(String::as_str)) {
        ("sh" | "bash" | "ash", Some("-c")) => {
            let script = argv.get(2).cloned().unwrap_or_default();
            shell.script(&script).await.0
        }
        ("sh" | "bash" | "ash", None) => shell.interactive().await,
        _ => match shell.command(argv).await {
            Step::NotFound => {
                return Err(format!(
                    "OCI runtime exec failed: exec failed: unable to start container process: \
                     exec: \"{program}\": executable file not found in $PATH: unknown"
                ))
            }
            Step::Code(code) | Step::Exit(code) => code,
        },
    };
    let _ = shell.io.stdout.flush().await;
    let _ = shell.io.stderr.flush().await;
    Ok(code)
}

fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// What running one command did.
enum Step {
    /// It ran, with this exit code.
    Code(i32),
    /// `exit`: the shell ends with this code.
    Exit(i32),
    /// No such command.
    NotFound,
}

struct Shell<'a, R, O, E> {
    container: &'a Container,
    io: Io<R, O, E>,
    /// `$?`.
    status: i32,
    /// The terminal's last size, (width, height).
    size: Option<(u16, u16)>,
}

/// How one command of a script joins the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Join {
    Always,
    And,
    Or,
}

impl<R, O, E> Shell<'_, R, O, E>
where
    R: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    async fn out(&mut self, text: &[u8]) {
        let _ = write_to(&mut self.io.stdout, text, self.io.tty).await;
    }

    async fn err(&mut self, text: &[u8]) {
        let _ = write_to(&mut self.io.stderr, text, self.io.tty).await;
    }

    /// Run a script; its exit code, and whether it ran `exit`.
    async fn script(&mut self, script: &str) -> (i32, bool) {
        let mut join = Join::Always;
        for (words, next) in split_commands(script) {
            let run = match join {
                Join::Always => true,
                Join::And => self.status == 0,
                Join::Or => self.status != 0,
            };
            join = next;
            if !run {
                continue;
            }
            let argv: Vec<String> = words.iter().map(|w| self.expand(w)).collect();
            if argv.is_empty() {
                continue;
            }
            match self.command(&argv).await {
                Step::Code(code) => self.status = code,
                Step::Exit(code) => return (code, true),
                Step::NotFound => {
                    let line = format!("sh: 1: {}: not found\n", argv[0]);
                    self.err(line.as_bytes()).await;
                    self.status = 127;
                }
            }
        }
        (self.status, false)
    }

    /// A shell reading its commands from standard input, with a prompt on a terminal.
    async fn interactive(&mut self) -> i32 {
        let Some(stdin) = self.io.stdin.take() else { return 0 };
        let mut lines = BufReader::new(stdin);
        loop {
            if self.io.tty {
                self.out(b"# ").await;
                let _ = self.io.stdout.flush().await;
            }
            let mut line = Vec::new();
            match read_line(&mut lines, &mut line, self.io.tty).await {
                Ok(0) | Err(_) => return self.status,
                Ok(_) => {}
            }
            if self.io.tty {
                let mut echo = line.clone();
                echo.push(b'\n');
                self.out(&echo).await;
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            let (code, exited) = self.script(&line).await;
            self.status = code;
            if exited {
                return code;
            }
        }
    }

    fn expand(&self, word: &Word) -> String {
        let mut out = String::new();
        for part in &word.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Var(name) if name == "?" => out.push_str(&self.status.to_string()),
                Part::Var(name) => {
                    if let Some((_, v)) = self.container.env.iter().rev().find(|(k, _)| k == name) {
                        out.push_str(v);
                    } else if name == "HOSTNAME" {
                        out.push_str(&self.container.hostname);
                    }
                }
            }
        }
        out
    }

    async fn command(&mut self, argv: &[String]) -> Step {
        let args = &argv[1..];
        let code = match base_name(&argv[0]) {
            "true" | ":" => 0,
            "false" => 1,
            "exit" => {
                let code = args.first().map_or(Ok(self.status), |a| a.parse::<i32>());
                return Step::Exit(code.map_or(2, |c| c & 0xff));
            }
            "echo" => {
                let (newline, words) = match args.first().map(String::as_str) {
                    Some("-n") => (false, &args[1..]),
                    _ => (true, args),
                };
                let mut text = words.join(" ");
                if newline {
                    text.push('\n');
                }
                self.out(text.as_bytes()).await;
                0
            }
            "stty" => self.stty(args).await,
            "hostname" => {
                let text = format!("{}\n", self.container.hostname);
                self.out(text.as_bytes()).await;
                0
            }
            "pwd" => {
                self.out(b"/\n").await;
                0
            }
            "env" => {
                let mut text = String::new();
                for (k, v) in self.env() {
                    text.push_str(&format!("{k}={v}\n"));
                }
                self.out(text.as_bytes()).await;
                0
            }
            "printenv" => {
                let env = self.env();
                let mut text = String::new();
                let mut code = 0;
                if args.is_empty() {
                    for (k, v) in &env {
                        text.push_str(&format!("{k}={v}\n"));
                    }
                }
                for name in args {
                    match env.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => text.push_str(&format!("{v}\n")),
                        None => code = 1,
                    }
                }
                self.out(text.as_bytes()).await;
                code
            }
            "sleep" => {
                let seconds = args.first().and_then(|a| a.parse::<f64>().ok());
                match seconds.filter(|s| s.is_finite() && *s >= 0.0) {
                    Some(s) => {
                        tokio::time::sleep(Duration::from_secs_f64(s.min(86_400.0))).await;
                        0
                    }
                    None => {
                        self.err(b"sleep: invalid time interval\n").await;
                        1
                    }
                }
            }
            "cat" => self.cat(args).await,
            "tar" => self.tar(args).await,
            "test" | "[" => self.test(args),
            "ls" => self.ls(args).await,
            "nvidia-smi" => self.nvidia_smi(args).await,
            _ => return Step::NotFound,
        };
        Step::Code(code)
    }

    /// `stty size`: the terminal's rows and columns, as the client last sized it. A client sizes
    /// its terminal as it connects, on a stream of its own, so a terminal not sized yet is waited
    /// for a moment ([`FIRST_SIZE`]; `0 0` if it never is).
    async fn stty(&mut self, args: &[String]) -> i32 {
        if !self.io.tty {
            self.err(b"stty: 'standard input': Inappropriate ioctl for device\n").await;
            return 1;
        }
        if let Some(sizes) = self.io.sizes.as_mut() {
            if self.size.is_none() {
                if let Ok(Some(size)) = tokio::time::timeout(FIRST_SIZE, sizes.recv()).await {
                    self.size = Some(size);
                }
            }
            while let Ok(size) = sizes.try_recv() {
                self.size = Some(size);
            }
        }
        match args.first().map(String::as_str) {
            Some("size") => {
                let (width, height) = self.size.unwrap_or((0, 0));
                self.out(format!("{height} {width}\n").as_bytes()).await;
                0
            }
            _ => {
                self.err(b"stty: only 'stty size' is simulated\n").await;
                1
            }
        }
    }

    /// The environment a command sees: the container's, then `HOSTNAME`.
    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "PATH".to_owned(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            ),
            ("HOSTNAME".to_owned(), self.container.hostname.clone()),
        ];
        env.extend(self.container.env.iter().cloned());
        env
    }

    async fn cat(&mut self, args: &[String]) -> i32 {
        if args.is_empty() || args == ["-"] {
            let Some(stdin) = self.io.stdin.as_mut() else { return 0 };
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => return 0,
                    Ok(n) => {
                        let _ = write_to(&mut self.io.stdout, &buf[..n], self.io.tty).await;
                        let _ = self.io.stdout.flush().await;
                    }
                }
            }
        }
        let mut code = 0;
        for path in args {
            match self.container.files.read(&absolute(path)) {
                Some(contents) => self.out(&contents).await,
                None if !self.container.files.list(&absolute(path)).is_empty() => {
                    self.err(format!("cat: {path}: Is a directory\n").as_bytes()).await;
                    code = 1;
                }
                None => {
                    self.err(format!("cat: {path}: No such file or directory\n").as_bytes()).await;
                    code = 1;
                }
            }
        }
        code
    }

    /// `test -d|-f|-e PATH` (also `[ … ]`).
    fn test(&self, args: &[String]) -> i32 {
        let args: Vec<&str> = args.iter().map(String::as_str).filter(|a| *a != "]").collect();
        let (flag, path) = match args.as_slice() {
            [flag, path] => (*flag, absolute(path)),
            [path] => return i32::from(path.is_empty()),
            _ => return 2,
        };
        let file = self.container.files.read(&path).is_some();
        let dir = path == "/" || !self.container.files.list(&path).is_empty();
        let holds = match flag {
            "-d" => dir,
            "-f" => file,
            "-e" => file || dir,
            _ => return 2,
        };
        i32::from(!holds)
    }

    /// `tar`, as `kubectl cp` runs it: `tar cf - PATH` writes an archive of a file or
    /// directory to standard output, `tar xf - [-C DIR]` (with `-m`, `--no-same-owner`,
    /// `--no-same-permissions`) reads one from standard input.
    async fn tar(&mut self, args: &[String]) -> i32 {
        let mut create = false;
        let mut extract = false;
        let mut into = "/".to_owned();
        let mut paths = Vec::new();
        let mut words = args.iter();
        while let Some(word) = words.next() {
            match word.as_str() {
                "-C" | "--directory" => into = words.next().cloned().unwrap_or_default(),
                w if w.starts_with("--") => {}
                w if !w.starts_with('-') && paths.is_empty() && !create && !extract => {
                    // Bundled letters without a dash: `cf`, `xmf`.
                    create = w.contains('c');
                    extract = w.contains('x');
                    if w.contains('f') {
                        words.next();
                    }
                }
                w if w.starts_with('-') && w.len() > 1 => {
                    create |= w.contains('c');
                    extract |= w.contains('x');
                    if w.contains('f') {
                        words.next();
                    }
                }
                w => paths.push(w.to_owned()),
            }
        }
        if create == extract {
            self.err(b"tar: You must specify one of the '-Acdtrux' options\n").await;
            return 2;
        }
        if create {
            return match archive(&self.container.files, &paths) {
                Ok(bytes) => {
                    let _ = self.io.stdout.write_all(&bytes).await;
                    0
                }
                Err(message) => {
                    self.err(format!("tar: {message}\n").as_bytes()).await;
                    2
                }
            };
        }
        let mut input = Vec::new();
        if let Some(stdin) = self.io.stdin.as_mut() {
            let _ = stdin.read_to_end(&mut input).await;
        }
        match unpack(&self.container.files, &input, &into) {
            Ok(()) => 0,
            Err(message) => {
                self.err(format!("tar: {message}\n").as_bytes()).await;
                2
            }
        }
    }

    async fn ls(&mut self, args: &[String]) -> i32 {
        let paths: Vec<&str> =
            args.iter().map(String::as_str).filter(|a| !a.starts_with('-')).collect();
        let paths = if paths.is_empty() { vec!["/"] } else { paths };
        let mut code = 0;
        for path in paths {
            let full = absolute(path);
            if self.container.files.read(&full).is_some() {
                self.out(format!("{path}\n").as_bytes()).await;
                continue;
            }
            let entries = self.container.files.list(&full);
            if entries.is_empty() && full != "/" {
                let line = format!("ls: cannot access '{path}': No such file or directory\n");
                self.err(line.as_bytes()).await;
                code = 2;
                continue;
            }
            let text: String = entries.iter().map(|(name, _)| format!("{name}\n")).collect();
            self.out(text.as_bytes()).await;
        }
        code
    }

    async fn nvidia_smi(&mut self, args: &[String]) -> i32 {
        if self.container.devices.is_empty() {
            self.out(
                b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
                  Make sure that the latest NVIDIA driver is installed and running.\n",
            )
            .await;
            return 9;
        }
        if !args.iter().any(|a| a == "-L" || a == "--list-gpus") {
            self.err(b"nvidia-smi: only -L (--list-gpus) is simulated\n").await;
            return 2;
        }
        let text = list_gpus(&self.container.devices);
        self.out(text.as_bytes()).await;
        0
    }
}

/// A tar archive of `paths` (files, or directories and all under them), named without their
/// leading `/` as GNU tar names them.
fn archive(files: &Files, paths: &[String]) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    for path in paths {
        let full = absolute(path);
        let prefix = format!("{}/", full.trim_end_matches('/'));
        let found: Vec<(String, Vec<u8>)> = files
            .0
            .lock()
            .iter()
            .filter(|(p, _)| **p == full || p.starts_with(&prefix))
            .map(|(p, c)| (p.clone(), c.clone()))
            .collect();
        if found.is_empty() {
            return Err(format!("{path}: Cannot stat: No such file or directory"));
        }
        for (name, contents) in found {
            let mut header = tar::Header::new_gnu();
            header.set_size(u64::try_from(contents.len()).unwrap_or(0));
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, name.trim_start_matches('/'), contents.as_slice())
                .map_err(|e| e.to_string())?;
        }
    }
    builder.into_inner().map_err(|e| e.to_string())
}

/// Write the files of tar archive `bytes` under directory `into`.
fn unpack(files: &Files, bytes: &[u8], into: &str) -> Result<(), String> {
    let mut archive = tar::Archive::new(bytes);
    let entries = archive.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = entry.path().map_err(|e| e.to_string())?.to_string_lossy().into_owned();
        if name.split('/').any(|part| part == "..") {
            return Err(format!("{name}: a path outside the directory"));
        }
        let mut contents = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut contents).map_err(|e| e.to_string())?;
        let path = format!("{}/{}", into.trim_end_matches('/'), name.trim_start_matches('/'));
        files.write(&absolute(&path), contents);
    }
    Ok(())
}

/// `nvidia-smi -L` of `devices`: each physical GPU once, numbered from 0, with its MIG devices
/// under it, numbered from 0 on each GPU.
pub fn list_gpus(devices: &[Device]) -> String {
    let mut gpus: Vec<(&str, &str, Vec<&Device>)> = Vec::new();
    for d in devices {
        match gpus.iter_mut().find(|(uuid, _, _)| *uuid == d.gpu_uuid) {
            Some((_, _, migs)) => migs.push(d),
            None => gpus.push((&d.gpu_uuid, &d.gpu_name, vec![d])),
        }
    }
    let mut text = String::new();
    for (i, (uuid, name, migs)) in gpus.iter().enumerate() {
        text.push_str(&format!("GPU {i}: {name} (UUID: {uuid})\n"));
        for (j, mig) in migs.iter().enumerate() {
            text.push_str(&format!(
                "  MIG {:<11} Device {j:>2}: (UUID: {})\n",
                mig.profile, mig.uuid
            ));
        }
    }
    text
}

fn absolute(path: &str) -> String {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return "/".to_owned();
    }
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

/// Write `text`, with `\r\n` for `\n` on a terminal.
async fn write_to<W: AsyncWrite + Unpin>(
    out: &mut W,
    text: &[u8],
    tty: bool,
) -> std::io::Result<()> {
    if !tty {
        return out.write_all(text).await;
    }
    let mut converted = Vec::with_capacity(text.len() + 8);
    for &b in text {
        if b == b'\n' {
            converted.push(b'\r');
        }
        converted.push(b);
    }
    out.write_all(&converted).await
}

/// Read one line (without its end); on a terminal a carriage return ends it too. The bytes
/// read, 0 at the end of input.
async fn read_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
    tty: bool,
) -> std::io::Result<usize> {
    if !tty {
        let n = input.read_until(b'\n', line).await?;
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        return Ok(n);
    }
    let mut n = 0;
    loop {
        let mut byte = [0u8; 1];
        if input.read(&mut byte).await? == 0 {
            return Ok(n);
        }
        n += 1;
        match byte[0] {
            b'\r' | b'\n' => return Ok(n),
            // Ctrl-D on an empty line: end of input.
            4 if line.is_empty() => return Ok(0),
            b => line.push(b),
        }
    }
}

/// A word of a command: text and variables, quotes removed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Word(Vec<Part>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(String),
}

/// A script's commands, each with how it joins the next.
fn split_commands(script: &str) -> Vec<(Vec<Word>, Join)> {
    let mut commands = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut word: Option<Vec<Part>> = None;
    let mut chars = script.chars().peekable();
    let push_text = |word: &mut Option<Vec<Part>>, c: char| {
        let parts = word.get_or_insert_with(Vec::new);
        match parts.last_mut() {
            Some(Part::Text(t)) => t.push(c),
            _ => parts.push(Part::Text(c.to_string())),
        }
    };
    let end_word = |word: &mut Option<Vec<Part>>, words: &mut Vec<Word>| {
        if let Some(parts) = word.take() {
            words.push(Word(parts));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                word.get_or_insert_with(Vec::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    push_text(&mut word, c);
                }
            }
            '"' => {
                word.get_or_insert_with(Vec::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(next) = chars.next() {
                                push_text(&mut word, next);
                            }
                        }
                        '$' => read_var(&mut chars, &mut word, &push_text),
                        c => push_text(&mut word, c),
                    }
                }
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    push_text(&mut word, next);
                }
            }
            '$' => read_var(&mut chars, &mut word, &push_text),
            ';' | '\n' => {
                end_word(&mut word, &mut words);
                commands.push((std::mem::take(&mut words), Join::Always));
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                end_word(&mut word, &mut words);
                commands.push((std::mem::take(&mut words), Join::And));
            }
            '|' if chars.peek() == Some(&'|') => {
                chars.next();
                end_word(&mut word, &mut words);
                commands.push((std::mem::take(&mut words), Join::Or));
            }
            '#' if word.is_none() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                end_word(&mut word, &mut words);
                commands.push((std::mem::take(&mut words), Join::Always));
            }
            c if c.is_whitespace() => end_word(&mut word, &mut words),
            c => push_text(&mut word, c),
        }
    }
    end_word(&mut word, &mut words);
    commands.push((words, Join::Always));
    commands.retain(|(words, _)| !words.is_empty());
    commands
}

fn read_var(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    word: &mut Option<Vec<Part>>,
    push_text: &impl Fn(&mut Option<Vec<Part>>, char),
) {
    let mut name = String::new();
    match chars.peek() {
        Some('{') => {
            chars.next();
            for c in chars.by_ref() {
                if c == '}' {
                    break;
                }
                name.push(c);
            }
        }
        Some('?') => {
            chars.next();
            name.push('?');
        }
        _ => {
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
        }
    }
    if name.is_empty() {
        push_text(word, '$');
    } else {
        word.get_or_insert_with(Vec::new).push(Part::Var(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> Container {
        let files = Files::default();
        files.write("/etc/hostname", b"train\n".to_vec());
        files.write("/data/a.txt", b"A".to_vec());
        Container {
            hostname: "train".into(),
            env: vec![("GREETING".into(), "hello world".into())],
            devices: vec![
                Device {
                    gpu_name: "NVIDIA H200".into(),
                    gpu_uuid: "GPU-1".into(),
                    profile: "1g.18gb".into(),
                    uuid: "MIG-a".into(),
                },
                Device {
                    gpu_name: "NVIDIA H200".into(),
                    gpu_uuid: "GPU-1".into(),
                    profile: "2g.35gb".into(),
                    uuid: "MIG-b".into(),
                },
            ],
            files,
        }
    }

    async fn exec(argv: &[&str], stdin: &[u8], tty: bool) -> (Outcome, String, String) {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let io = Io { stdin: Some(stdin), stdout: &mut out, stderr: &mut err, tty, sizes: None };
        let outcome = run(&container(), &argv, io).await;
        (outcome, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[tokio::test]
    async fn scripts_run_their_commands_joined_as_a_shell_joins_them() {
        let (code, out, _) =
            exec(&["sh", "-c", "echo one; false && echo no || echo two"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(0), "one\ntwo\n"));
        let (code, out, _) =
            exec(&["sh", "-c", "echo \"$GREETING\" '$GREETING' ${HOSTNAME}"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(0), "hello world $GREETING train\n"));
        let (code, out, _) =
            exec(&["sh", "-c", "false; echo $?; exit 3; echo never"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(3), "1\n"));
        let (code, _, err) = exec(&["sh", "-c", "frobnicate"], b"", false).await;
        assert_eq!((code, err.as_str()), (Ok(127), "sh: 1: frobnicate: not found\n"));
    }

    #[tokio::test]
    async fn commands_without_a_shell_run_or_fail_to_start() {
        let (code, out, _) = exec(&["cat"], b"piped in", false).await;
        assert_eq!((code, out.as_str()), (Ok(0), "piped in"));
        let (code, out, _) = exec(&["printenv", "GREETING"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(0), "hello world\n"));
        let (code, out, err) = exec(&["cat", "/data/a.txt", "/nope"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(1), "A"));
        assert_eq!(err, "cat: /nope: No such file or directory\n");
        let (code, out, _) = exec(&["ls", "/"], b"", false).await;
        assert_eq!((code, out.as_str()), (Ok(0), "data\netc\n"));
        let (code, _, _) = exec(&["/bin/frobnicate"], b"", false).await;
        assert!(code.unwrap_err().contains("executable file not found in $PATH"));
    }

    #[tokio::test]
    async fn nvidia_smi_lists_the_pods_own_devices_under_their_gpu() {
        let (code, out, _) = exec(&["nvidia-smi", "-L"], b"", false).await;
        assert_eq!(code, Ok(0));
        assert_eq!(
            out,
            "GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 1g.18gb     Device  0: (UUID: MIG-a)\n  MIG 2g.35gb     Device  1: (UUID: MIG-b)\n"
        );
        let mut none = container();
        none.devices.clear();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let argv = ["nvidia-smi".to_owned(), "-L".to_owned()];
        let io = Io {
            stdin: None::<&[u8]>,
            stdout: &mut out,
            stderr: &mut err,
            tty: false,
            sizes: None,
        };
        assert_eq!(run(&none, &argv, io).await, Ok(9));
    }

    #[tokio::test]
    async fn stty_size_tells_the_terminals_last_size() {
        let c = container();
        let (resize, sizes) = tokio::sync::mpsc::channel(4);
        resize.send((80, 24)).await.unwrap();
        resize.send((132, 43)).await.unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let stdin: &[u8] = b"stty size\n";
        let io = Io {
            stdin: Some(stdin),
            stdout: &mut out,
            stderr: &mut err,
            tty: true,
            sizes: Some(sizes),
        };
        assert_eq!(run(&c, &["sh".to_owned()], io).await, Ok(0));
        let shown = String::from_utf8_lossy(&out);
        assert!(shown.contains("43 132\r\n"), "{shown:?}");
        // Without a terminal there is no size to tell.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let argv = ["stty".to_owned(), "size".to_owned()];
        let io = Io {
            stdin: None::<&[u8]>,
            stdout: &mut out,
            stderr: &mut err,
            tty: false,
            sizes: None,
        };
        assert_eq!(run(&c, &argv, io).await, Ok(1));
        assert!(String::from_utf8_lossy(&err).contains("Inappropriate ioctl"));
    }

    #[tokio::test]
    async fn tar_packs_and_unpacks_what_kubectl_cp_sends_both_ways() {
        let c = container();
        let run_tar = |argv: &[&str], input: Vec<u8>| {
            let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
            let c = c.clone();
            async move {
                let (mut out, mut err) = (Vec::new(), Vec::new());
                let io = Io {
                    stdin: Some(input.as_slice()),
                    stdout: &mut out,
                    stderr: &mut err,
                    tty: false,
                    sizes: None,
                };
                (run(&c, &argv, io).await, out)
            }
        };
        let (code, archive) = run_tar(&["tar", "cf", "-", "/data"], Vec::new()).await;
        assert_eq!(code, Ok(0));
        let (code, _) = run_tar(
            &["tar", "--no-same-permissions", "--no-same-owner", "-xmf", "-", "-C", "/copy"],
            archive,
        )
        .await;
        assert_eq!(code, Ok(0));
        assert_eq!(c.files.read("/copy/data/a.txt").as_deref(), Some(&b"A"[..]));
        let (code, _) = run_tar(&["test", "-d", "/copy/data"], Vec::new()).await;
        assert_eq!(code, Ok(0));
        let (code, _) = run_tar(&["test", "-d", "/copy/data/a.txt"], Vec::new()).await;
        assert_eq!(code, Ok(1));
        let (code, _) = run_tar(&["tar", "cf", "-", "/missing"], Vec::new()).await;
        assert_eq!(code, Ok(2));
    }

    #[tokio::test]
    async fn a_bare_shell_reads_its_commands_and_a_terminal_echoes_them() {
        let (code, out, _) = exec(&["sh"], b"echo a\nexit 4\necho b\n", false).await;
        assert_eq!((code, out.as_str()), (Ok(4), "a\n"));
        let (code, out, _) = exec(&["/bin/bash"], b"hostname\r", true).await;
        assert_eq!((code, out.as_str()), (Ok(0), "# hostname\r\ntrain\r\n# "));
    }
}
