//! Credential files: read whole, written whole (a temporary file renamed over the old one), keys
//! readable by the owner alone.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::CredentialError;

/// The mode of a private key file.
pub(super) const PRIVATE: u32 = 0o600;
/// The mode of a certificate file.
pub(super) const PUBLIC: u32 = 0o644;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError + '_ {
    move |source| CredentialError::Io { path: path.to_owned(), source }
}

/// The contents of `path`, which must exist and be UTF-8.
pub(super) fn read(path: &Path) -> Result<String, CredentialError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(CredentialError::Missing { path: path.to_owned() })
        }
        Err(e) => return Err(io(path)(e)),
    };
    String::from_utf8(bytes).map_err(|_| {
        CredentialError::invalid(path.display().to_string(), "not a PEM file (not UTF-8)")
    })
}

/// Whether `path` exists.
pub(super) fn exists(path: &Path) -> Result<bool, CredentialError> {
    path.try_exists().map_err(io(path))
}

/// Creates `dir` (mode 0700) and its parents if missing.
pub(super) fn create_dir(dir: &Path) -> Result<(), CredentialError> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io(dir))
}

/// Replaces `path` with `contents`, with exactly `mode`: written to a temporary file beside it,
/// synced, then renamed over it, so a crash leaves the old file or the new one, never half.
pub(super) fn write(path: &Path, contents: &str, mode: u32) -> Result<(), CredentialError> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io(&tmp)(e)),
    }
    let written = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        // The mode given at creation is filtered by the umask; set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()
    })();
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    // Make the rename itself durable; failing to sync a directory loses nothing already written.
    if let Some(dir) = path.parent() {
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_replaced_whole_with_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("k.key");
        create_dir(path.parent().unwrap()).unwrap();
        assert!(!exists(&path).unwrap());
        assert!(matches!(read(&path), Err(CredentialError::Missing { .. })));
        write(&path, "one", PRIVATE).unwrap();
        write(&path, "two", PRIVATE).unwrap();
        assert_eq!(read(&path).unwrap(), "two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let left: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read(&path), Err(CredentialError::Invalid { .. })));
    }
}
