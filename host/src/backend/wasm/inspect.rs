//! What a backend component asks of the host, read from its type before any of its code runs: the
//! `nereus:backend` version it was built against, whether it exports the lifecycle, and each
//! interface it imports with what the sandbox does with it.
//!
//! One reading serves two callers with the same words: `nereus plugin check` prints the whole
//! report before deployment, and loading a model refuses a component on the same grounds (an
//! interface Nereus does not provide, a newer `nereus:backend` than the server's, no lifecycle
//! export) rather than with the linker's "a matching implementation was not found".
use std::fmt;

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

/// The `nereus:backend` version this server implements (`wit/backend.wit`'s package line; a unit
/// test keeps them equal). A component built against any 1.x up to it loads.
pub const HOST_WORLD_VERSION: Version = Version { major: 1, minor: 2, patch: 0 };

/// The capability of `nereus:backend/models`, which `sandbox.callable_models` grants.
pub const MODEL_CALLS: &str = "calls to other models";

/// The interface every backend exports.
const LIFECYCLE: &str = "nereus:backend/lifecycle";

/// A semver version as WIT names carry it (`@1.1.0`; pre-release tags are not used here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Version {
    fn parse(text: &str) -> Option<Version> {
        let mut parts = text.split('.').map(|p| p.parse::<u64>().ok());
        let version = Version { major: parts.next()??, minor: parts.next()??, patch: parts.next()?? };
        parts.next().is_none().then_some(version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What the sandbox does with an imported interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Provided and usable.
    Granted,
    /// Provided, but the capability behind it is withheld: calls fail (no file, no socket) or see
    /// nothing (an empty environment, discarded output). The component loads.
    Denied,
    /// Withheld unless the model's policy grants it (the model folder, read-only).
    ByPolicy,
    /// Not provided at all: the component cannot be instantiated, so it does not load.
    Missing,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Grant::Granted => "granted",
            Grant::Denied => "denied",
            Grant::ByPolicy => "denied by default",
            Grant::Missing => "not provided",
        })
    }
}

/// One imported interface, e.g. `wasi:sockets/tcp@0.2.3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// The name as the component spells it.
    pub name: String,
    /// What it is for, in a user's words ("network", "files").
    pub capability: &'static str,
    pub grant: Grant,
    /// How the sandbox treats it, one clause.
    pub note: &'static str,
}

/// Everything the type of a component says about it as a backend.
#[derive(Clone, Debug)]
pub struct ComponentReport {
    /// The `nereus:backend` version of its lifecycle export; `None` when it exports no lifecycle.
    pub world: Option<Version>,
    /// What it exports, by name.
    pub exports: Vec<String>,
    pub imports: Vec<Import>,
}

/// Why a component cannot be a backend of this server, before the linker's type check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("it exports no {LIFECYCLE} interface, so it is not a Nereus backend (it exports: {})", list(.exports))]
    NoLifecycle { exports: Vec<String> },
    #[error(
        "it was built against nereus:backend@{found}, which this server ({HOST_WORLD_VERSION}) does not implement: build it against {}.x up to {HOST_WORLD_VERSION}",
        HOST_WORLD_VERSION.major
    )]
    OtherMajor { found: Version },
    #[error("it imports {name} ({capability}), which Nereus does not provide to sandboxed backends")]
    MissingImport { name: String, capability: &'static str },
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "nothing".into() } else { items.join(", ") }
}

impl ComponentReport {
    /// Reads a compiled component's imports and exports.
    pub fn of(engine: &Engine, component: &Component) -> ComponentReport {
        let ty = component.component_type();
        let exports: Vec<String> = ty.exports(engine).map(|(name, _)| name.to_string()).collect();
        let world = exports.iter().find_map(|name| {
            let (interface, version) = split_version(name);
            (interface == LIFECYCLE).then(|| version.and_then(Version::parse)).flatten()
        });
        let imports = ty
            .imports(engine)
            .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
            .map(|(name, _)| classify(name))
            .collect();
        ComponentReport { world, exports, imports }
    }

    /// The first reason the component cannot load here, if any. A component built against a newer
    /// 1.x than the server's is not refused here: it loads when it uses nothing newer, and the
    /// linker's type check names the function it lacks otherwise (see [`ComponentReport::newer`]).
    pub fn unusable(&self) -> Option<Unusable> {
        let Some(world) = self.world else {
            return Some(Unusable::NoLifecycle { exports: self.exports.clone() });
        };
        if world.major != HOST_WORLD_VERSION.major {
            return Some(Unusable::OtherMajor { found: world });
        }
        self.imports
            .iter()
            .find(|i| i.grant == Grant::Missing)
            .map(|i| Unusable::MissingImport { name: i.name.clone(), capability: i.capability })
    }

    /// The version it was built against, when newer than the server's (a warning: it may use
    /// functions this server lacks).
    pub fn newer(&self) -> Option<Version> {
        self.world.filter(|w| w.major == HOST_WORLD_VERSION.major && *w > HOST_WORLD_VERSION)
    }

    /// The imports whose capability the sandbox withholds, for the load's log.
    pub fn withheld(&self) -> impl Iterator<Item = &Import> {
        self.imports.iter().filter(|i| matches!(i.grant, Grant::Denied | Grant::ByPolicy))
    }
}

/// `ns:pkg/interface@1.2.3` → (`ns:pkg/interface`, `Some("1.2.3")`).
fn split_version(name: &str) -> (&str, Option<&str>) {
    match name.split_once('@') {
        Some((interface, version)) => (interface, Some(version)),
        None => (name, None),
    }
}

/// What the host does with an imported interface. The table follows what `WasmRuntime` links
/// (wasmtime-wasi's WASI 0.2 interfaces and the Nereus host) and how `Sandbox::new` configures
/// WASI (no preopened directory but the optional `/model`, no environment, no sockets, stdio
/// discarded); a unit test keeps it honest against the linker.
fn classify(name: &str) -> Import {
    let (interface, version) = split_version(name);
    let (package, item) = interface.split_once('/').unwrap_or((interface, ""));
    let wasi_02 = version.and_then(Version::parse).is_some_and(|v| v.major == 0 && v.minor == 2);
    let (capability, grant, note) = match package {
        "nereus:backend" if version.and_then(Version::parse).is_none_or(|v| v.major != HOST_WORLD_VERSION.major) => {
            ("the Nereus host API of another major version", Grant::Missing, "this server implements 1.x")
        }
        "nereus:backend" => match item {
            "host" | "types" => ("the Nereus host API", Grant::Granted, "logging and the response sender"),
            "models" => {
                (MODEL_CALLS, Grant::ByPolicy, "only the models sandbox.callable_models lists (none by default)")
            }
            _ => ("an unknown part of the Nereus host API", Grant::Missing, "not in nereus:backend"),
        },
        _ if package.starts_with("wasi:") && !wasi_02 => {
            ("a WASI version other than 0.2", Grant::Missing, "Nereus links WASI 0.2 (preview 2)")
        }
        "wasi:io" => ("streams and polling", Grant::Granted, "a call that would block fails instead"),
        "wasi:clocks" => ("clocks", Grant::Granted, "wall and monotonic time"),
        "wasi:random" => ("random numbers", Grant::Granted, "from the host's generator"),
        "wasi:cli" => match item {
            "environment" => ("environment variables and arguments", Grant::Denied, "the sandbox sees none"),
            "exit" => ("exiting", Grant::Granted, "exit traps: the request fails and the instance is rebuilt"),
            "stdin" | "terminal-input" | "terminal-stdin" => ("standard input", Grant::Denied, "always empty"),
            "stdout" | "stderr" | "terminal-output" | "terminal-stdout" | "terminal-stderr" => {
                ("standard output and error", Grant::Denied, "discarded: log through host.log instead")
            }
            _ => ("an unknown wasi:cli interface", Grant::Missing, "not in WASI 0.2"),
        },
        "wasi:filesystem" => (
            "files",
            Grant::ByPolicy,
            "no directory is visible, unless the model sets sandbox.model_dir: \"read_only\" (its version folder at /model)",
        ),
        "wasi:sockets" => ("network", Grant::Denied, "every address is refused"),
        "wasi:http" => ("HTTP requests", Grant::Missing, "a sandboxed backend makes no network calls"),
        _ => ("an interface unknown to Nereus", Grant::Missing, "nothing provides it"),
    };
    Import { name: name.to_string(), capability, grant, note }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wasm::{Metering, WasmRuntime};

    #[test]
    fn host_world_version_is_the_wit_package_version() {
        let wit = include_str!("../../../../wit/backend.wit");
        let line = wit.lines().find(|l| l.starts_with("package nereus:backend@")).expect("a package line");
        let version = line.trim_start_matches("package nereus:backend@").trim_end_matches(';');
        assert_eq!(Version::parse(version), Some(HOST_WORLD_VERSION));
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(Version::parse("1.2.3"), Some(Version { major: 1, minor: 2, patch: 3 }));
        assert_eq!(Version::parse("1.2"), None);
        assert_eq!(Version::parse("1.2.3.4"), None);
        assert_eq!(Version::parse("1.x.0"), None);
        assert!(Version::parse("1.10.0") > Version::parse("1.9.9"));
    }

    fn report(bytes: &[u8]) -> ComponentReport {
        let runtime = WasmRuntime::new(None).unwrap();
        let component = Component::new(runtime.engine(), bytes).unwrap();
        ComponentReport::of(runtime.engine(), &component)
    }

    /// Every interface the example and fault-injection plugins import is classified as something
    /// the linker provides, and they load: the table agrees with `WasmRuntime`'s linker.
    #[test]
    fn the_plugins_imports_are_all_provided() {
        let runtime = WasmRuntime::new(None).unwrap();
        for (name, path) in nereus_plugins::ALL {
            let bytes = &std::fs::read(path).unwrap();
            let component = Component::new(runtime.engine(), bytes).unwrap();
            let report = ComponentReport::of(runtime.engine(), &component);
            assert_eq!(report.unusable(), None, "{name}: {report:?}");
            assert!(runtime.load(bytes, Metering::Off).is_ok(), "{name} loads");
            assert!(report.imports.iter().any(|i| i.name.starts_with("nereus:backend/host@")), "{name}");
        }
    }

    #[test]
    fn the_fault_plugin_asks_for_files_and_network_and_is_told_no() {
        let report = report(&std::fs::read(nereus_plugins::TEST_FAULTS).unwrap());
        let grant = |prefix: &str| report.imports.iter().find(|i| i.name.starts_with(prefix)).map(|i| i.grant);
        assert_eq!(grant("wasi:filesystem/preopens@"), Some(Grant::ByPolicy));
        assert_eq!(grant("wasi:sockets/tcp@"), Some(Grant::Denied));
        assert_eq!(grant("wasi:cli/environment@"), Some(Grant::Denied));
        assert_eq!(report.world, Some(HOST_WORLD_VERSION));
    }

    #[test]
    fn the_1_0_plugin_is_built_against_1_0() {
        let report = report(&std::fs::read(nereus_plugins::COMPAT_V1_0).unwrap());
        assert_eq!(report.world, Some(Version { major: 1, minor: 0, patch: 0 }));
        assert_eq!(report.newer(), None);
        assert_eq!(report.unusable(), None);
    }

    fn component_with(import: &str, export: &str) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(component
                 (import "{import}" (instance))
                 (instance $l)
                 (export "{export}" (instance $l)))"#
        ))
        .unwrap()
    }

    #[test]
    fn an_http_client_is_refused_by_name() {
        let r = report(&component_with("wasi:http/outgoing-handler@0.2.0", "nereus:backend/lifecycle@1.1.0"));
        assert_eq!(
            r.unusable().map(|u| u.to_string()).as_deref(),
            Some(
                "it imports wasi:http/outgoing-handler@0.2.0 (HTTP requests), which Nereus does not provide to sandboxed backends"
            )
        );
    }

    #[test]
    fn wasi_0_3_is_not_wasi_0_2() {
        let r = report(&component_with("wasi:clocks/monotonic-clock@0.3.0", "nereus:backend/lifecycle@1.0.0"));
        assert!(matches!(r.unusable(), Some(Unusable::MissingImport { .. })), "{r:?}");
    }

    #[test]
    fn a_command_component_is_not_a_backend() {
        let r = report(&component_with("wasi:cli/stdout@0.2.0", "wasi:cli/run@0.2.0"));
        assert_eq!(r.world, None);
        assert_eq!(r.unusable(), Some(Unusable::NoLifecycle { exports: vec!["wasi:cli/run@0.2.0".into()] }));
    }

    #[test]
    fn another_major_version_is_refused_and_a_newer_minor_is_flagged() {
        let r = report(&component_with("wasi:random/random@0.2.0", "nereus:backend/lifecycle@2.0.0"));
        assert!(matches!(r.unusable(), Some(Unusable::OtherMajor { .. })));
        let r = report(&component_with("wasi:random/random@0.2.0", "nereus:backend/lifecycle@1.7.0"));
        assert_eq!(r.unusable(), None);
        assert_eq!(r.newer(), Some(Version { major: 1, minor: 7, patch: 0 }));
    }
}
