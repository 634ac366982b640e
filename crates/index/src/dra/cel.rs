//! DRA's CEL selectors, evaluated in Rust: `device.driver`,
//! `device.attributes[domain][name]`, `device.capacity[domain][name]`, with
//! the Kubernetes extensions DRA expressions use.
//!
//! ```text
//!  expression ─ compile ─▶ Selector          (once per DeviceClass / request)
//!  Device ───── device ──▶ Value {driver, attributes, capacity}   (per device)
//!  Selector.matches(Value) ─▶ true | false | Err (the claim waits, naming both)
//! ```
//!
//! Beyond the CEL standard library and the strings and lists extensions:
//! `quantity(s)`, `isQuantity(s)`, and on a quantity `compareTo`,
//! `isGreaterThan`, `isLessThan`, `add`, `sub`, `asInteger`,
//! `asApproximateFloat`, `isInteger`, `sign`; `semver(s)`, `isSemver(s)`, and
//! on a version `compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`,
//! `patch`. Version-typed attributes are versions, capacities are quantities
//! (as in Kubernetes, `==` compares them by value). Unqualified attribute and
//! capacity names belong to the driver's domain.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::extractors::This;
use cel::objects::{Key, Map, Opaque};
use cel::{Context, Env, ExecutionError, Program, Value};
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

use super::quantity;

/// The environment every selector compiles in: the standard library with
/// the strings and lists extensions.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Declared once on a fresh environment: these cannot collide.
    let _ = cel::extensions::strings(&mut env);
    let _ = cel::extensions::lists(&mut env);
    Arc::new(env)
});

/// A compiled selector expression.
#[derive(Clone)]
pub(crate) struct Selector {
    pub expression: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Selector").field(&self.expression).finish()
    }
}

/// Compiles `expression`; the error says why it does not parse.
pub(crate) fn compile(expression: &str) -> Result<Selector, String> {
    let program = ENV
        .compile(expression)
        .map_err(|e| e.to_string().trim().to_owned())?;
    Ok(Selector {
        expression: expression.to_owned(),
        program: Arc::new(program),
    })
}

/// Evaluates selectors: the functions, declared once per evaluator.
pub(crate) struct Evaluator {
    root: Context<'static, 'static>,
}

impl Evaluator {
    pub fn new() -> Self {
        let mut root = Context::with_env(Arc::clone(&ENV));
        declare(&mut root);
        Self { root }
    }

    /// Whether `device` (see [`DeviceInput`]) matches; an error when the
    /// expression fails on it or is not a boolean. The device is lent to
    /// the expression as it is, not copied.
    pub fn matches(&self, selector: &Selector, device: &DeviceInput) -> Result<bool, String> {
        let root: &Context<'_, '_> = &self.root;
        let lent = Lent(&*device.val);
        let mut scope = root.new_inner_scope();
        scope.set_variable_resolver(&lent);
        match selector.program.execute(&scope) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "the expression gives {}, not a boolean",
                type_name(&other)
            )),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// The `device` variable of one device, in the form expressions read it,
/// made once per published device rather than once per evaluation.
#[derive(Clone, Debug)]
pub(crate) struct DeviceInput {
    value: Value,
    val: Arc<dyn Val>,
}

impl DeviceInput {
    /// The `device` variable of a device `driver` publishes.
    pub fn of(driver: &str, device: &Device) -> Self {
        let value = self::device(driver, device);
        let val: Box<dyn Val> = value
            .clone()
            .try_into()
            .expect("maps, strings, booleans and quantities convert");
        Self {
            value,
            val: Arc::from(val),
        }
    }
}

impl PartialEq for DeviceInput {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// Resolves `device` to a device lent for one evaluation.
struct Lent<'a>(&'a dyn Val);

impl VariableResolver for Lent<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "device").then_some(CowVal::Borrowed(self.0))
    }
}

fn type_name(value: &Value) -> String {
    format!("{:?}", value.type_of())
        .to_lowercase()
        .trim_matches('"')
        .to_owned()
}

/// The `device` variable of a device `driver` publishes.
pub(crate) fn device(driver: &str, device: &Device) -> Value {
    let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, attribute) in device.attributes.iter().flatten() {
        let (domain, short) = qualified(driver, name);
        attributes
            .entry(domain)
            .or_default()
            .insert(short, attribute_value(attribute));
    }
    let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, c) in device.capacity.iter().flatten() {
        let (domain, short) = qualified(driver, name);
        let value = match Quantity::parse(&c.value.0) {
            Some(q) => Value::Opaque(Arc::new(q)),
            None => Value::String(Arc::new(c.value.0.clone())),
        };
        capacity.entry(domain).or_default().insert(short, value);
    }
    // A domain nothing is published under reads as an empty map, as in
    // Kubernetes: `'x' in device.attributes['other.domain']` is false.
    attributes.entry(driver.to_owned()).or_default();
    capacity.entry(driver.to_owned()).or_default();
    let nested = |m: HashMap<String, HashMap<String, Value>>| {
        let map: HashMap<Key, Value> = m
            .into_iter()
            .map(|(domain, names)| (Key::from(domain), Value::from(names)))
            .collect();
        Value::Map(Map { map: Arc::new(map) })
    };
    let mut fields: HashMap<Key, Value> = HashMap::new();
    fields.insert(Key::from("driver"), Value::from(driver));
    fields.insert(Key::from("attributes"), nested(attributes));
    fields.insert(Key::from("capacity"), nested(capacity));
    fields.insert(
        Key::from("allowMultipleAllocations"),
        Value::Bool(device.allow_multiple_allocations == Some(true)),
    );
    Value::Map(Map {
        map: Arc::new(fields),
    })
}

/// `name` as (domain, name): unqualified names are the driver's.
pub(crate) fn qualified(driver: &str, name: &str) -> (String, String) {
    match name.rsplit_once('/') {
        Some((domain, short)) => (domain.to_owned(), short.to_owned()),
        None => (driver.to_owned(), name.to_owned()),
    }
}

fn attribute_value(attribute: &DeviceAttribute) -> Value {
    if let Some(i) = attribute.int {
        Value::Int(i)
    } else if let Some(b) = attribute.bool {
        Value::Bool(b)
    } else if let Some(s) = &attribute.string {
        Value::String(Arc::new(s.clone()))
    } else if let Some(v) = &attribute.version {
        match Semver::parse(v) {
            Some(v) => Value::Opaque(Arc::new(v)),
            None => Value::String(Arc::new(v.clone())),
        }
    } else {
        Value::Null
    }
}

/// A Kubernetes quantity, in thousandths (`500m` is 500, `1Gi` is 2^30 × 1000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Quantity(i128);

impl Quantity {
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let milli = i128::try_from(quantity::parse_scaled(digits, 3)?).ok()?;
        Some(Quantity(if negative { -milli } else { milli }))
    }
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version (`major.minor.patch[-pre][+build]`; build metadata is
/// ignored, a pre-release sorts before its release).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semver {
    core: (u64, u64, u64),
    pre: Option<String>,
}

impl Semver {
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().split('+').next()?;
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) if !pre.is_empty() => (core, Some(pre.to_owned())),
            Some(_) => return None,
            None => (text, None),
        };
        let mut parts = core.split('.').map(|p| {
            let leading_zero = p.len() > 1 && p.starts_with('0');
            (!leading_zero).then(|| p.parse::<u64>().ok()).flatten()
        });
        let version = (parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(Semver { core: version, pre })
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        self.core
            .cmp(&other.core)
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => compare_pre(a, b),
            })
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Pre-release identifiers compared as semver says: numbers numerically
/// and below words, words in ASCII order, fewer identifiers first.
fn compare_pre(a: &str, b: &str) -> Ordering {
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn fail(function: &str, message: impl std::fmt::Display) -> ExecutionError {
    ExecutionError::function_error(function, message.to_string())
}

fn quantity_of(function: &str, value: &Value) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<Quantity>()
            .copied()
            .ok_or_else(|| fail(function, "not a quantity")),
        Value::Int(i) => Ok(Quantity(i128::from(*i) * 1000)),
        _ => Err(fail(
            function,
            format!("{} is not a quantity", type_name(value)),
        )),
    }
}

/// Two quantities or two versions, ordered.
fn order(function: &str, this: &Value, other: &Value) -> Result<Ordering, ExecutionError> {
    if let (Value::Opaque(a), Value::Opaque(b)) = (this, other)
        && let (Some(a), Some(b)) = (a.downcast_ref::<Semver>(), b.downcast_ref::<Semver>())
    {
        return Ok(a.cmp(b));
    }
    Ok(quantity_of(function, this)?.cmp(&quantity_of(function, other)?))
}

fn semver_of(function: &str, value: &Value) -> Result<Semver, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<Semver>()
            .cloned()
            .ok_or_else(|| fail(function, "not a version")),
        _ => Err(fail(
            function,
            format!("{} is not a version", type_name(value)),
        )),
    }
}

fn sign(ordering: Ordering) -> i64 {
    match ordering {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// Declares the Kubernetes extensions on `context`.
fn declare(context: &mut Context<'static, 'static>) {
    let add = |result: Result<(), cel::DeclarationError>| {
        if let Err(error) = result {
            tracing::error!(%error, "Cannot declare a CEL function");
        }
    };
    add(context.add_function("quantity", |s: Arc<String>| {
        Quantity::parse(&s)
            .map(|q| Value::Opaque(Arc::new(q)))
            .ok_or_else(|| fail("quantity", format!("{s:?} is not a quantity")))
    }));
    add(context.add_function("isQuantity", |s: Arc<String>| Quantity::parse(&s).is_some()));
    add(context.add_function("semver", |s: Arc<String>| {
        Semver::parse(&s)
            .map(|v| Value::Opaque(Arc::new(v)))
            .ok_or_else(|| fail("semver", format!("{s:?} is not a semantic version")))
    }));
    add(context.add_function("isSemver", |s: Arc<String>| Semver::parse(&s).is_some()));
    add(context.add_function(
        "compareTo",
        |This(this): This<Value>, other: Value| -> Result<i64, ExecutionError> {
            Ok(sign(order("compareTo", &this, &other)?))
        },
    ));
    add(context.add_function(
        "isGreaterThan",
        |This(this): This<Value>, other: Value| -> Result<bool, ExecutionError> {
            Ok(order("isGreaterThan", &this, &other)? == Ordering::Greater)
        },
    ));
    add(context.add_function(
        "isLessThan",
        |This(this): This<Value>, other: Value| -> Result<bool, ExecutionError> {
            Ok(order("isLessThan", &this, &other)? == Ordering::Less)
        },
    ));
    add(context.add_function(
        "add",
        |This(this): This<Value>, other: Value| -> Result<Value, ExecutionError> {
            let sum = quantity_of("add", &this)?.0 + quantity_of("add", &other)?.0;
            Ok(Value::Opaque(Arc::new(Quantity(sum))))
        },
    ));
    add(context.add_function(
        "sub",
        |This(this): This<Value>, other: Value| -> Result<Value, ExecutionError> {
            let difference = quantity_of("sub", &this)?.0 - quantity_of("sub", &other)?.0;
            Ok(Value::Opaque(Arc::new(Quantity(difference))))
        },
    ));
    add(context.add_function(
        "asInteger",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            let q = quantity_of("asInteger", &this)?;
            if q.0 % 1000 != 0 {
                return Err(fail("asInteger", "the quantity is not a whole number"));
            }
            i64::try_from(q.0 / 1000).map_err(|_| fail("asInteger", "the quantity overflows int"))
        },
    ));
    add(context.add_function(
        "isInteger",
        |This(this): This<Value>| -> Result<bool, ExecutionError> {
            let q = quantity_of("isInteger", &this)?;
            Ok(q.0 % 1000 == 0 && i64::try_from(q.0 / 1000).is_ok())
        },
    ));
    add(context.add_function(
        "asApproximateFloat",
        |This(this): This<Value>| -> Result<f64, ExecutionError> {
            Ok(quantity_of("asApproximateFloat", &this)?.0 as f64 / 1000.0)
        },
    ));
    add(context.add_function(
        "sign",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            Ok(sign(quantity_of("sign", &this)?.0.cmp(&0)))
        },
    ));
    add(context.add_function(
        "major",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            Ok(semver_of("major", &this)?.core.0 as i64)
        },
    ));
    add(context.add_function(
        "minor",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            Ok(semver_of("minor", &this)?.core.1 as i64)
        },
    ));
    add(context.add_function(
        "patch",
        |This(this): This<Value>| -> Result<i64, ExecutionError> {
            Ok(semver_of("patch", &this)?.core.2 as i64)
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::tests::nvidia_gpu;

    fn eval(expression: &str) -> Result<bool, String> {
        let mut device = nvidia_gpu("gpu-0", "GPU-0", "NVIDIA H100 80GB HBM3", "80Gi");
        device.attributes.get_or_insert_default().insert(
            "resource.kubernetes.io/pciBusID".into(),
            DeviceAttribute {
                string: Some("0000:1d:00.0".into()),
                ..Default::default()
            },
        );
        let selector = compile(expression)?;
        Evaluator::new().matches(&selector, &DeviceInput::of("gpu.nvidia.com", &device))
    }

    #[test]
    fn nvidias_selectors_read_attributes_and_capacity() {
        for yes in [
            "device.driver == 'gpu.nvidia.com'",
            "device.attributes['gpu.nvidia.com'].type == 'gpu'",
            "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')",
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('79Gi'))",
            "device.capacity['gpu.nvidia.com'].memory == quantity('81920Mi')",
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))",
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() == 9",
            "device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:')",
            "!('pcieRoot' in device.attributes['gpu.nvidia.com'])",
            "isQuantity('1.5Gi') && !isQuantity('lots')",
            "quantity('500m').isLessThan(quantity('1'))",
        ] {
            assert_eq!(eval(yes), Ok(true), "{yes}");
        }
        for no in [
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-PCIE-40GB'",
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0",
        ] {
            assert_eq!(eval(no), Ok(false), "{no}");
        }
    }

    #[test]
    fn what_cannot_be_evaluated_is_an_error_never_a_guess() {
        assert!(compile("device.attributes[").is_err());
        let missing = eval("device.attributes['gpu.nvidia.com'].nothing == 'x'").unwrap_err();
        assert!(missing.contains("nothing"), "{missing}");
        let not_bool = eval("device.driver").unwrap_err();
        assert!(not_bool.contains("not a boolean"), "{not_bool}");
        assert!(eval("quantity('lots').sign() == 1").is_err());
    }

    #[test]
    fn versions_order_as_semver_says() {
        let v = |s| Semver::parse(s).unwrap();
        assert!(v("1.0.0-alpha") < v("1.0.0-alpha.1"));
        assert!(v("1.0.0-alpha.beta") < v("1.0.0-beta"));
        assert!(v("1.0.0-rc.1") < v("1.0.0"));
        assert!(v("9.0.0") > v("8.9.10"));
        assert_eq!(v("1.2.3+build"), v("1.2.3"));
        assert!(Semver::parse("1.2").is_none() && Semver::parse("01.2.3").is_none());
    }
}
