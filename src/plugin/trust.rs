//! Which plug-in files are trusted enough to load: loading one runs its code inside the agent,
//! so a file that someone other than the agent's user (or root) could have written is refused
//! before anything of it runs.
//!
//! The rules, checked before `dlopen`:
//! - the plug-in file and the directory it is found in are owned by the effective user or by
//!   root, and are not writable by group or other;
//! - the file is an ELF shared object of this machine's word size and byte order whose dynamic
//!   symbol table defines `nixl_telemetry_plugin_init`, so an arbitrary library found under a
//!   plug-in's name is refused before its constructors could run;
//! - `NIXL_PLUGIN_DIR` is an absolute path (a relative one would depend on the working
//!   directory of whichever process loads the library).

use std::ffi::CStr;
use std::fs;
use std::path::Path;

use nixl_telemetry_base::trusted_file::owner_or_mode_problem;

use crate::error::{Error, Result, Status};

/// Refuses `path` (a plug-in file or directory, named `what` in messages) unless it passes the
/// trusted-file rule of owner and mode ([`owner_or_mode_problem`]).
pub(crate) fn check_owner_and_mode(path: &Path, what: &str) -> Result<()> {
    let meta = fs::metadata(path)
        .map_err(|e| Error::io(format!("cannot inspect {what} {}", path.display()), &e))?;
    match owner_or_mode_problem(&meta) {
        None => Ok(()),
        Some(why) => Err(Error::new(
            Status::NotAllowed,
            format!(
                "refusing to load telemetry plug-ins from {what} {}: it {why} (a plug-in runs \
                 inside the agent, so only files that the agent's user or root can write are \
                 trusted)",
                path.display()
            ),
        )),
    }
}

/// Refuses a relative `NIXL_PLUGIN_DIR`.
pub(crate) fn check_plugin_dir_var(dir: &Path) -> Result<()> {
    if dir.is_absolute() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{}={} is a relative path: set it to an absolute directory",
            crate::settings::PLUGIN_DIR.name,
            dir.display()
        )))
    }
}

/// Whether the ELF shared object `bytes` defines the dynamic symbol `symbol`: `Err` with the
/// reason when it is not an ELF shared object of this machine's kind. A file without section
/// headers (stripped with `sstrip`) cannot be checked and passes (`dlsym` checks it after
/// loading).
pub(crate) fn defines_symbol(bytes: &[u8], symbol: &CStr) -> std::result::Result<bool, String> {
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
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
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
    fn writable_or_foreign_places_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        check_owner_and_mode(dir.path(), "directory").unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_owner_and_mode(dir.path(), "directory").unwrap_err();
        assert_eq!(e.status, Status::NotAllowed);
        assert!(
            e.message
                .contains("it is writable by group or others (mode 0777)"),
            "{}",
            e.message
        );
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o770)).unwrap();
        let e = check_owner_and_mode(dir.path(), "directory").unwrap_err();
        assert!(e.message.contains("(mode 0770)"), "{}", e.message);
        assert!(check_plugin_dir_var(Path::new("plugins")).is_err());
        assert!(check_plugin_dir_var(Path::new("/opt/plugins")).is_ok());
    }
}
