//! Which plug-in files are trusted enough to load: loading one runs its code inside the agent,
//! so a file that someone other than the agent's user (or root) could have written is refused
//! before anything of it runs. The core's loader checks each plug-in with [`check_trusted`]
//! before `dlopen`, and so does the NIXL adapter before its C++ half opens one of ours.
//!
//! The rules:
//! - the file passes the trusted-file rule of a file found by searching
//!   ([`crate::trusted_file`], [`Place::Searched`]): a regular file, not a symbolic link, owned
//!   by the effective user or by root and writable by nobody else, in a directory likewise (no
//!   sticky-directory exception), checked on the opened descriptor and read up to
//!   [`MAX_PLUGIN_FILE_BYTES`];
//! - what was read is an ELF shared object of this machine's word size and byte order whose
//!   dynamic symbol table defines the entry point, so an arbitrary library found under a
//!   plug-in's name is refused before its constructors could run.

use std::ffi::CStr;
use std::path::Path;

use crate::error::{Error, Result, Status};
use crate::trusted_file::{open_trusted, read_bounded, Place};

/// The largest plug-in file read for the check: a shipped plug-in is a few megabytes, one built
/// without optimisation and with debug information a few tens.
pub const MAX_PLUGIN_FILE_BYTES: u64 = 256 << 20;

/// What must hold before the shared library at `path` may be opened: it is trusted (the module's
/// rules) and its dynamic symbol table defines `entry` (`what` names the kind of library in
/// messages: "telemetry exporter plug-in"). An untrusted file is refused with
/// [`Status::NotAllowed`], one without `entry` with [`Status::Mismatch`], one that is not a
/// shared object of this machine with [`Status::Backend`].
pub fn check_trusted(path: &Path, entry: &CStr, what: &str) -> Result<()> {
    let shown = path.display();
    let bytes = open_trusted(path, Place::Searched)
        .and_then(|file| read_bounded(file, MAX_PLUGIN_FILE_BYTES))
        .map_err(|why| {
            Error::new(
                Status::NotAllowed,
                format!(
                    "refusing to load {what} {shown}: it {why} (a plug-in runs inside the \
                     agent, so only files that the agent's user or root can write are trusted)"
                ),
            )
        })?;
    match defines_symbol(&bytes, entry) {
        Err(why) => Err(Error::new(
            Status::Backend,
            format!("cannot load {what} {shown}: {why}"),
        )),
        Ok(false) => Err(Error::new(
            Status::Mismatch,
            format!(
                "{shown} is not a {what}: it has no {}",
                entry.to_string_lossy()
            ),
        )),
        Ok(true) => Ok(()),
    }
}

/// Whether the ELF shared object `bytes` defines the dynamic symbol `symbol`: `Err` with the
/// reason when it is not an ELF shared object of this machine's kind. A file without section
/// headers (stripped with `sstrip`) cannot be checked and passes (`dlsym` checks it after
/// loading).
fn defines_symbol(bytes: &[u8], symbol: &CStr) -> std::result::Result<bool, String> {
    let elf = Elf::parse(bytes)?;
    let wanted = symbol.to_bytes();
    let tables = elf.dynamic_tables()?;
    if tables.is_empty() {
        return Ok(true);
    }
    for (dynsym, strtab) in tables {
        let entry_size = if elf.is_64 { 24 } else { 16 };
        for sym in dynsym.chunks_exact(entry_size) {
            let name = elf.u32_at(sym, 0)? as usize;
            // st_shndx: after st_info/st_other at 4/5 (64-bit) or at 14 (32-bit).
            let shndx = elf.u16_at(sym, if elf.is_64 { 6 } else { 14 })?;
            let defined = shndx != 0;
            let name_bytes = strtab.get(name..).unwrap_or(&[]);
            let end = name_bytes.iter().position(|&b| b == 0).unwrap_or(0);
            if defined && &name_bytes[..end] == wanted {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A dynamic symbol table and the string table its names point into.
type SymbolTable<'a> = (&'a [u8], &'a [u8]);

/// The parts of an ELF file's header that locate its section table.
struct Elf<'a> {
    bytes: &'a [u8],
    is_64: bool,
}

impl<'a> Elf<'a> {
    fn parse(bytes: &'a [u8]) -> std::result::Result<Elf<'a>, String> {
        if bytes.len() < 52 || &bytes[..4] != b"\x7fELF" {
            return Err("it is not an ELF file".into());
        }
        let is_64 = bytes[4] == 2;
        let little = bytes[5] == 1;
        if is_64 != cfg!(target_pointer_width = "64") || little != cfg!(target_endian = "little") {
            return Err("it is an ELF file of another word size or byte order".into());
        }
        let elf = Elf { bytes, is_64 };
        const ET_DYN: u16 = 3;
        if elf.u16_at(bytes, 16)? != ET_DYN {
            return Err("it is not an ELF shared object".into());
        }
        Ok(elf)
    }

    fn slice(
        &self,
        from: &'a [u8],
        at: usize,
        len: usize,
    ) -> std::result::Result<&'a [u8], String> {
        from.get(at..at.checked_add(len).ok_or("bad offset")?)
            .ok_or_else(|| "it is a truncated ELF file".to_string())
    }

    /// `N` bytes at `at` of `from`. The file's byte order is this machine's (checked by
    /// `parse`), so fields are read in native order.
    fn bytes_at<const N: usize>(
        &self,
        from: &[u8],
        at: usize,
    ) -> std::result::Result<[u8; N], String> {
        from.get(at..at.checked_add(N).ok_or("bad offset")?)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| "it is a truncated ELF file".to_string())
    }

    fn u16_at(&self, from: &[u8], at: usize) -> std::result::Result<u16, String> {
        self.bytes_at(from, at).map(u16::from_ne_bytes)
    }

    fn u32_at(&self, from: &[u8], at: usize) -> std::result::Result<u32, String> {
        self.bytes_at(from, at).map(u32::from_ne_bytes)
    }

    /// An address-sized field (u64 in ELF64, u32 in ELF32).
    fn word_at(&self, from: &[u8], at: usize) -> std::result::Result<usize, String> {
        let value = if self.is_64 {
            u64::from_ne_bytes(self.bytes_at(from, at)?)
        } else {
            u64::from(self.u32_at(from, at)?)
        };
        usize::try_from(value).map_err(|_| "bad ELF offset".to_string())
    }

    /// Every (SHT_DYNSYM section, its linked string table) pair.
    fn dynamic_tables(&self) -> std::result::Result<Vec<SymbolTable<'a>>, String> {
        const SHT_DYNSYM: u32 = 11;
        let b = self.bytes;
        let (shoff, shentsize, shnum) = if self.is_64 {
            (
                self.word_at(b, 40)?,
                self.u16_at(b, 58)? as usize,
                self.u16_at(b, 60)? as usize,
            )
        } else {
            (
                self.word_at(b, 32)?,
                self.u16_at(b, 46)? as usize,
                self.u16_at(b, 48)? as usize,
            )
        };
        let section = |i: usize| self.slice(b, shoff + i * shentsize, shentsize);
        // sh_type at 4; sh_offset, sh_size and sh_link where each layout puts them.
        let (off_at, size_at, link_at) = if self.is_64 {
            (24, 32, 40)
        } else {
            (16, 20, 24)
        };
        let mut tables = Vec::new();
        for i in 0..shnum {
            let header = section(i)?;
            if self.u32_at(header, 4)? != SHT_DYNSYM {
                continue;
            }
            let data = self.slice(
                b,
                self.word_at(header, off_at)?,
                self.word_at(header, size_at)?,
            )?;
            let link = section(self.u32_at(header, link_at)? as usize)?;
            let strings =
                self.slice(b, self.word_at(link, off_at)?, self.word_at(link, size_at)?)?;
            tables.push((data, strings));
        }
        Ok(tables)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn this_test_binary_is_not_a_shared_object() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // A test executable is ET_EXEC or ET_DYN (PIE); either way it parses or is refused
        // cleanly, never panics.
        let _ = defines_symbol(&me, c"nixl_telemetry_plugin_init");
        assert!(defines_symbol(
            b"not an elf file at all, just text....................",
            c"x"
        )
        .unwrap_err()
        .contains("not an ELF file"));
        let mut cut = me[..64].to_vec();
        cut[16] = 3; // claim ET_DYN, then run out of bytes
        assert!(defines_symbol(&cut, c"x").is_err());
    }

    #[test]
    fn files_in_writable_directories_links_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("libtelemetry_exporter_x.so");
        std::fs::write(&file, b"not an ELF file").unwrap();
        let check = |path: &Path| check_trusted(path, c"entry", "test plug-in");
        // Trusted, then refused for what it holds.
        let e = check(&file).unwrap_err();
        assert_eq!(e.status, Status::Backend, "{}", e.message);
        assert!(e.message.contains("not an ELF file"), "{}", e.message);
        let link = dir.path().join("libtelemetry_exporter_link.so");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = check(&link).unwrap_err();
        assert_eq!(e.status, Status::NotAllowed);
        assert!(e.message.contains("is a symbolic link"), "{}", e.message);
        for mode in [0o777, 0o770] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = check(&file).unwrap_err();
            assert_eq!(e.status, Status::NotAllowed);
            assert!(
                e.message.contains(&format!(
                    "which is writable by group or others (mode {mode:04o})"
                )),
                "{}",
                e.message
            );
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check(&file).unwrap_err();
        assert_eq!(e.status, Status::NotAllowed);
        assert!(e.message.contains("(mode 0666)"), "{}", e.message);
    }
}
