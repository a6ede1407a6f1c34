//! The compiler wrappers: the compiler (`$PONTOON_CC`, default `cc`; `$PONTOON_CXX`,
//! default `c++`) with pontoon's include directory and, when linking, its library with
//! a run path. `-show` (or `-showme`) prints the command instead of running it.

use std::ffi::OsString;
use std::process::{Command, ExitCode};

use crate::abi_paths::AbiPaths;

/// Which compiler: its variable and default.
pub struct Lang {
    pub var: &'static str,
    pub default: &'static str,
}

/// Flags that stop the compiler before linking.
const NO_LINK: &[&str] = &["-c", "-E", "-S", "-M", "-MM", "-fsyntax-only"];

/// The whole command line for `args`.
pub fn command(lang: &Lang, paths: &AbiPaths, args: &[OsString]) -> Vec<OsString> {
    let compiler = std::env::var_os(lang.var).unwrap_or_else(|| lang.default.into());
    let mut cmd = vec![compiler];
    cmd.push(format!("-I{}", paths.include.display()).into());
    cmd.extend(args.iter().cloned());
    let links = !args.is_empty() && !args.iter().any(|a| NO_LINK.iter().any(|f| a == f));
    if links {
        let lib = paths.lib.display();
        cmd.push(format!("-L{lib}").into());
        // RUNPATH (not RPATH): LD_LIBRARY_PATH still wins, as with other MPIs.
        cmd.push(format!("-Wl,-rpath,{lib}").into());
        cmd.push("-Wl,--enable-new-dtags".into());
        cmd.push("-lmpi_abi".into());
    }
    cmd
}

pub fn main(lang: Lang) -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let show = args
        .iter()
        .any(|a| a == "-show" || a == "-showme" || a == "--showme");
    args.retain(|a| a != "-show" && a != "-showme" && a != "--showme");
    let paths = match AbiPaths::find() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pontoon-cc: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cmd = command(&lang, &paths, &args);
    if show {
        let words: Vec<String> = cmd.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        println!("{}", words.join(" "));
        return ExitCode::SUCCESS;
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(st) => ExitCode::from(st.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("pontoon-cc: cannot run {}: {e}", cmd[0].to_string_lossy());
            ExitCode::FAILURE
        }
    }
}
