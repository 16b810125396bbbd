//! Criterion benches for the scheduler's hot paths on upstream's benchmark workload
//! (`scheduling::benchmark`): a fresh scheduler per solve, as `karpenter bench scheduling` does.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use karpenter_core::scheduling::benchmark::{diverse_pods, preference_pods, scheduler_input};
use karpenter_core::scheduling::{PreferencePolicy, Scheduler};

fn diverse(c: &mut Criterion) {
    let mut group = c.benchmark_group("diverse");
    group.sample_size(10);
    for n in [100usize, 1000, 5000] {
        let pods = diverse_pods(n, 42);
        group.bench_with_input(BenchmarkId::from_parameter(n), &pods, |b, pods| {
            b.iter(|| {
                Scheduler::new(scheduler_input(PreferencePolicy::Respect)).solve(black_box(pods))
            })
        });
    }
    group.finish();
}

fn preferences(c: &mut Criterion) {
    let mut group = c.benchmark_group("preferences");
    group.sample_size(10);
    let pods = preference_pods(4000, 42);
    for (name, policy) in [
        ("respect", PreferencePolicy::Respect),
        ("ignore", PreferencePolicy::Ignore),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| Scheduler::new(scheduler_input(policy)).solve(black_box(&pods)))
        });
    }
    group.finish();
}

fn setup(c: &mut Criterion) {
    // Scheduler construction + one pod: the fixed cost every solve pays (400 instance types).
    let pods = diverse_pods(1, 42);
    c.bench_function("one_pod_400_types", |b| {
        b.iter(|| {
            Scheduler::new(scheduler_input(PreferencePolicy::Respect)).solve(black_box(&pods))
        })
    });
}

criterion_group!(benches, diverse, preferences, setup);
criterion_main!(benches);
