//! Man pages and shell completions generated from a program's clap
//! definition, so what `--help` says and what the package installs never
//! disagree. Each binary exposes them through a hidden subcommand that the
//! packaging script (`packaging/build-deb`) calls.

use std::fs;
use std::io;
use std::path::Path;

use clap::Command;
use clap_complete::Shell;

/// Writes into `dir`: `man/NAME.SECTION` for the program and
/// `man/NAME-SUB.SECTION` for each of its (visible) subcommands, at every
/// depth, and
/// `completions/` for bash (`NAME`), zsh (`_NAME`) and fish (`NAME.fish`).
pub fn write_all(cmd: Command, section: &str, dir: &Path) -> io::Result<()> {
    write_all_with_exits(cmd, section, dir, &[])
}

/// As [`write_all`], each page with an EXIT STATUS section listing
/// `exits` (code, meaning); none when `exits` is empty.
pub fn write_all_with_exits(
    cmd: Command,
    section: &str,
    dir: &Path,
    exits: &[(&str, &str)],
) -> io::Result<()> {
    let mut cmd = cmd;
    cmd.build();
    let name = cmd.get_name().to_string();
    let man = dir.join("man");
    fs::create_dir_all(&man)?;
    pages(&cmd, &name, section, &man, exits)?;
    let comp = dir.join("completions");
    fs::create_dir_all(&comp)?;
    for (shell, file) in [
        (Shell::Bash, name.clone()),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ] {
        let mut out = fs::File::create(comp.join(file))?;
        clap_complete::generate(shell, &mut cmd.clone(), &name, &mut out);
    }
    Ok(())
}

/// The page of `cmd` (named `name`), then those of its subcommands, at every
/// depth (`name-sub-subsub`), but hidden ones and `help`.
fn pages(
    cmd: &Command,
    name: &str,
    section: &str,
    dir: &Path,
    exits: &[(&str, &str)],
) -> io::Result<()> {
    let mut out = fs::File::create(dir.join(format!("{name}.{section}")))?;
    let man = clap_mangen::Man::new(cmd.clone().name(name.to_string())).section(section);
    if exits.is_empty() {
        man.render(&mut out)?;
    } else {
        // clap_mangen's order, with EXIT STATUS where man-pages(7) puts it.
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut out)?;
        }
        if cmd.has_subcommands() {
            man.render_subcommands_section(&mut out)?;
        }
        if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
            man.render_extra_section(&mut out)?;
        }
        io::Write::write_all(&mut out, exit_status(exits).as_bytes())?;
        if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
            man.render_version_section(&mut out)?;
        }
        if cmd.get_author().is_some() {
            man.render_authors_section(&mut out)?;
        }
    }
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        pages(
            sub,
            &format!("{name}-{}", sub.get_name()),
            section,
            dir,
            exits,
        )?;
    }
    Ok(())
}

/// An EXIT STATUS section in roff: one tagged paragraph per code.
fn exit_status(exits: &[(&str, &str)]) -> String {
    let esc = |t: &str| {
        let t = t.replace('\\', "\\e");
        if t.starts_with('.') || t.starts_with('\'') {
            format!("\\&{t}")
        } else {
            t
        }
    };
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exits {
        s.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", esc(code), esc(meaning)));
    }
    s
}

/// A man page for a configuration file: a description, then the file's
/// commented example verbatim (it is the reference), and pointers.
pub fn config_page(
    name: &str,
    section: &str,
    summary: &str,
    intro: &str,
    example: &str,
    see_also: &str,
) -> String {
    let mut s = format!(
        ".TH {} {section}\n.SH NAME\n{} \\- {}\n.SH DESCRIPTION\n{}\n.SH EXAMPLE\nThe file as shipped, every setting with its default and meaning:\n.PP\n.nf\n",
        roff_text(&name.to_uppercase()),
        roff_text(name),
        roff_text(summary),
        roff_text(intro)
    );
    for line in example.lines() {
        s.push_str(&roff_line(line));
        s.push('\n');
    }
    s.push_str(&format!(".fi\n.SH SEE ALSO\n{}\n", roff_text(see_also)));
    s
}

/// Text with roff's escape character escaped.
fn roff_text(t: &str) -> String {
    t.replace('\\', "\\e")
}

/// A line of a no-fill block: escapes, and a leading control character made
/// literal.
fn roff_line(l: &str) -> String {
    let l = roff_text(l);
    if l.starts_with('.') || l.starts_with('\'') {
        format!("\\&{l}")
    } else {
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_for_a_command_and_its_subcommands() {
        let cmd = Command::new("demo")
            .about("A demo")
            .subcommand(
                Command::new("go")
                    .about("Go somewhere")
                    .subcommand(Command::new("far").about("Far away")),
            )
            .subcommand(Command::new("secret").hide(true));
        let dir = std::env::temp_dir().join(format!("clidoc-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write_all(cmd, "8", &dir).unwrap();
        let top = fs::read_to_string(dir.join("man/demo.8")).unwrap();
        assert!(
            top.contains(".TH demo 8") && top.contains("A demo"),
            "{top}"
        );
        let go = fs::read_to_string(dir.join("man/demo-go.8")).unwrap();
        assert!(go.contains("Go somewhere"), "{go}");
        let far = fs::read_to_string(dir.join("man/demo-go-far.8")).unwrap();
        assert!(far.contains("Far away"), "{far}");
        assert!(!dir.join("man/demo-secret.8").exists());
        assert!(!dir.join("man/demo-help.8").exists());
        for f in ["demo", "_demo", "demo.fish"] {
            let c = fs::read_to_string(dir.join("completions").join(f)).unwrap();
            assert!(c.contains("demo"), "{f}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_config_page_keeps_the_example_literal() {
        let p = config_page(
            "demo.toml",
            "5",
            "demo's configuration",
            "Read at start.",
            "# a comment\n.dot = \"a\\\\b\"\n'quote",
            "demo(8)",
        );
        assert!(p.starts_with(".TH DEMO.TOML 5\n"), "{p}");
        assert!(p.contains("\n\\&.dot = \"a\\e\\eb\"\n"), "{p}");
        assert!(p.contains("\n\\&'quote\n"), "{p}");
        assert!(p.contains(".nf\n# a comment\n"), "{p}");
    }

    #[test]
    fn exit_status_is_a_roff_section_of_tagged_paragraphs() {
        let s = super::exit_status(&[("0", "success"), ("2", ".refused \\ said")]);
        assert_eq!(
            s,
            ".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR\nsuccess\n.TP\n\\fB2\\fR\n\\&.refused \\e said\n"
        );
    }
}
