//! The CEL rules (`x-kubernetes-validations`) of the CRDs, in one table.
//!
//! Each rule is written once here: the CRD generator inserts it at its schema paths, and the offline
//! validator (`crate::validation`) implements the same check in Rust and reports the same message.
//! Rule text follows upstream's semantics; a few rules are written more defensively (`has()` guards,
//! `matches` before `int()`) so that client-side evaluation gives a clean false instead of an error.

/// Which CRD a rule belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Crd {
    NodePool,
    NodeClaim,
    EC2NodeClass,
    NodeOverlay,
    CapacityBuffer,
}

impl Crd {
    /// Every CRD, in the order `karpenter crds` writes them.
    pub const ALL: [Crd; 5] = [
        Crd::NodePool,
        Crd::NodeClaim,
        Crd::EC2NodeClass,
        Crd::NodeOverlay,
        Crd::CapacityBuffer,
    ];
}

/// A CEL validation rule and where it lives in the schema.
#[derive(Debug)]
pub struct CelRule {
    /// CRD and schema path (fields joined by `.`, `[]` = list items) the rule is attached to.
    pub paths: &'static [(Crd, &'static str)],
    /// The CEL expression.
    pub rule: &'static str,
    /// The message the API server (and `karpenter validate`) reports.
    pub message: &'static str,
    /// How to fix it.
    pub hint: &'static str,
}

impl CelRule {
    /// Transition rules compare against `oldSelf` and only run on update.
    pub fn is_transition(&self) -> bool {
        self.rule.contains("oldSelf")
    }
}

macro_rules! rules {
    ($($name:ident { paths: $paths:expr, rule: $rule:expr, message: $message:expr, hint: $hint:expr $(,)? })*) => {
        $(pub static $name: CelRule = CelRule { paths: $paths, rule: $rule, message: $message, hint: $hint };)*
        /// Every rule, in declaration order.
        pub static ALL: &[&CelRule] = &[$(&$name),*];
    };
}

use Crd::{
    CapacityBuffer as CB, EC2NodeClass as EC2, NodeClaim as NC, NodeOverlay as NO, NodePool as NP,
};

const NP_REQS: &str = "spec.template.spec.requirements";
const NC_REQS: &str = "spec.requirements";
const NO_REQS: &str = "spec.requirements";

rules! {
    // ---- NodePool spec ------------------------------------------------------------------------
    STATIC_TRANSITION {
        paths: &[(NP, "spec")],
        rule: "has(self.replicas) == has(oldSelf.replicas)",
        message: "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        hint: "delete and recreate the NodePool to change its mode",
    }
    STATIC_LIMITS {
        paths: &[(NP, "spec")],
        rule: "!has(self.replicas) || !has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits)",
        message: "only 'limits.nodes' is supported on static NodePools",
        hint: "remove the other limits or remove spec.replicas",
    }
    STATIC_WEIGHT {
        paths: &[(NP, "spec")],
        rule: "!has(self.replicas) || !has(self.weight)",
        message: "'weight' is not supported on static NodePools",
        hint: "remove spec.weight or remove spec.replicas",
    }
    BUDGET_SCHEDULE_WITH_DURATION {
        paths: &[(NP, "spec.disruption.budgets")],
        rule: "self.all(x, has(x.schedule) == has(x.duration))",
        message: "'schedule' must be set with 'duration'",
        hint: "set both schedule and duration on the budget, or neither",
    }
    // ---- labels and requirement keys ----------------------------------------------------------
    LABELS_KARPENTER_DOMAIN {
        paths: &[(NP, "spec.template.metadata.labels")],
        rule: "self.all(x, x in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !x.find('^([^/]+)').endsWith('karpenter.sh'))",
        message: "label domain \"karpenter.sh\" is restricted",
        hint: "use a label domain of your own, e.g. example.com/team",
    }
    LABELS_NODEPOOL {
        paths: &[(NP, "spec.template.metadata.labels")],
        rule: "self.all(x, x != 'karpenter.sh/nodepool')",
        message: "label \"karpenter.sh/nodepool\" is restricted",
        hint: "Karpenter sets karpenter.sh/nodepool itself; remove it",
    }
    LABELS_HOSTNAME {
        paths: &[(NP, "spec.template.metadata.labels")],
        rule: "self.all(x, x != 'kubernetes.io/hostname')",
        message: "label \"kubernetes.io/hostname\" is restricted",
        hint: "the kubelet sets kubernetes.io/hostname; remove it",
    }
    REQ_KEY_KARPENTER_DOMAIN {
        paths: &[(NP, "spec.template.spec.requirements[].key"), (NC, "spec.requirements[].key"), (NO, "spec.requirements[].key")],
        rule: "self in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.find('^([^/]+)').endsWith('karpenter.sh')",
        message: "label domain \"karpenter.sh\" is restricted",
        hint: "only karpenter.sh/capacity-type may be used from the karpenter.sh domain",
    }
    REQ_KEY_NODEPOOL {
        paths: &[(NP, "spec.template.spec.requirements[].key")],
        rule: "self != 'karpenter.sh/nodepool'",
        message: "label \"karpenter.sh/nodepool\" is restricted",
        hint: "a NodePool cannot select on its own name; remove this requirement",
    }
    REQ_KEY_HOSTNAME {
        paths: &[(NP, "spec.template.spec.requirements[].key"), (NC, "spec.requirements[].key"), (NO, "spec.requirements[].key")],
        rule: "self != 'kubernetes.io/hostname'",
        message: "label \"kubernetes.io/hostname\" is restricted",
        hint: "hostnames are not known before launch; remove this requirement",
    }
    // ---- requirements lists -------------------------------------------------------------------
    REQ_IN_HAS_VALUES {
        paths: &[(NP, NP_REQS), (NC, NC_REQS), (NO, NO_REQS)],
        rule: "self.all(x, x.operator == 'In' ? (has(x.values) && x.values.size() != 0) : true)",
        message: "requirements with operator 'In' must have a value defined",
        hint: "add at least one value, or use operator Exists",
    }
    REQ_NUMERIC_SINGLE_VALUE {
        paths: &[(NP, NP_REQS), (NC, NC_REQS), (NO, NO_REQS)],
        rule: "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && x.values[0].matches('^[0-9]+$') && int(x.values[0]) >= 0) : true)",
        message: "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        hint: "use exactly one non-negative integer, e.g. values: [\"2\"]",
    }
    REQ_MIN_VALUES_LE_VALUES {
        paths: &[(NP, NP_REQS), (NC, NC_REQS)],
        rule: "self.all(x, (x.operator == 'In' && has(x.minValues)) ? (has(x.values) && x.values.size() >= x.minValues) : true)",
        message: "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        hint: "add values or lower minValues",
    }
    // ---- nodeClassRef -------------------------------------------------------------------------
    NODECLASSREF_GROUP_NONEMPTY {
        paths: &[(NP, "spec.template.spec.nodeClassRef.group"), (NC, "spec.nodeClassRef.group")],
        rule: "self != ''",
        message: "group may not be empty",
        hint: "use group: karpenter.k8s.aws",
    }
    NODECLASSREF_KIND_NONEMPTY {
        paths: &[(NP, "spec.template.spec.nodeClassRef.kind"), (NC, "spec.nodeClassRef.kind")],
        rule: "self != ''",
        message: "kind may not be empty",
        hint: "use kind: EC2NodeClass",
    }
    NODECLASSREF_NAME_NONEMPTY {
        paths: &[(NP, "spec.template.spec.nodeClassRef.name"), (NC, "spec.nodeClassRef.name")],
        rule: "self != ''",
        message: "name may not be empty",
        hint: "name the EC2NodeClass this pool uses",
    }
    NODECLASSREF_GROUP_IMMUTABLE {
        paths: &[(NP, "spec.template.spec.nodeClassRef")],
        rule: "self.group == oldSelf.group",
        message: "nodeClassRef.group is immutable",
        hint: "create a new NodePool to use a different NodeClass group",
    }
    NODECLASSREF_KIND_IMMUTABLE {
        paths: &[(NP, "spec.template.spec.nodeClassRef")],
        rule: "self.kind == oldSelf.kind",
        message: "nodeClassRef.kind is immutable",
        hint: "create a new NodePool to use a different NodeClass kind",
    }
    NODECLAIM_SPEC_IMMUTABLE {
        paths: &[(NC, "spec")],
        rule: "self == oldSelf",
        message: "spec is immutable",
        hint: "NodeClaims cannot be changed; delete it and let Karpenter create a new one",
    }
    // ---- EC2NodeClass spec --------------------------------------------------------------------
    EC2_ROLE_XOR_INSTANCE_PROFILE {
        paths: &[(EC2, "spec")],
        rule: "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
        message: "must specify exactly one of ['role', 'instanceProfile']",
        hint: "set spec.role (Karpenter manages the instance profile) or spec.instanceProfile, not both",
    }
    EC2_ROLE_TO_INSTANCE_PROFILE {
        paths: &[(EC2, "spec")],
        rule: "has(oldSelf.role) ? has(self.role) : true",
        message: "changing from 'role' to 'instanceProfile' is not supported. You must delete and recreate this node class if you want to change this.",
        hint: "delete and recreate the EC2NodeClass",
    }
    EC2_INSTANCE_PROFILE_TO_ROLE {
        paths: &[(EC2, "spec")],
        rule: "has(oldSelf.instanceProfile) ? has(self.instanceProfile) : true",
        message: "changing from 'instanceProfile' to 'role' is not supported. You must delete and recreate this node class if you want to change this.",
        hint: "delete and recreate the EC2NodeClass",
    }
    EC2_AMI_FAMILY_REQUIRED {
        paths: &[(EC2, "spec")],
        rule: "!has(self.amiSelectorTerms) || self.amiSelectorTerms.exists(x, has(x.alias)) || has(self.amiFamily)",
        message: "amiFamily must be specified if amiSelectorTerms does not contain an alias",
        hint: "set amiFamily (e.g. AL2023) or select the AMI with an alias such as al2023@latest",
    }
    EC2_AMI_FAMILY_MATCHES_ALIAS {
        paths: &[(EC2, "spec")],
        rule: "!(has(self.amiFamily) && has(self.amiSelectorTerms) && self.amiSelectorTerms.exists(x, has(x.alias))) || self.amiFamily == 'Custom' || self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+').lowerAscii() == self.amiFamily.lowerAscii())",
        message: "amiFamily must match the alias family (or be Custom) when amiSelectorTerms contains an alias",
        hint: "remove amiFamily; the alias already decides it",
    }
    EC2_SUBNET_TERMS_NONEMPTY {
        paths: &[(EC2, "spec.subnetSelectorTerms")],
        rule: "self.size() != 0",
        message: "subnetSelectorTerms cannot be empty",
        hint: "add a term such as {tags: {karpenter.sh/discovery: my-cluster}}",
    }
    EC2_SUBNET_TERM_NONEMPTY {
        paths: &[(EC2, "spec.subnetSelectorTerms[]")],
        rule: "has(self.tags) || has(self.id)",
        message: "expected at least one, got none, ['tags', 'id']",
        hint: "select subnets by tags or by id",
    }
    EC2_SUBNET_TERM_ID_EXCLUSIVE {
        paths: &[(EC2, "spec.subnetSelectorTerms[]")],
        rule: "!has(self.id) || !has(self.tags)",
        message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        hint: "put the id in its own term",
    }
    EC2_SG_TERMS_NONEMPTY {
        paths: &[(EC2, "spec.securityGroupSelectorTerms")],
        rule: "self.size() != 0",
        message: "securityGroupSelectorTerms cannot be empty",
        hint: "add a term such as {tags: {karpenter.sh/discovery: my-cluster}}",
    }
    EC2_SG_TERM_NONEMPTY {
        paths: &[(EC2, "spec.securityGroupSelectorTerms[]")],
        rule: "has(self.tags) || has(self.id) || has(self.name)",
        message: "expected at least one, got none, ['tags', 'id', 'name']",
        hint: "select security groups by tags, id or name",
    }
    EC2_SG_TERM_ID_EXCLUSIVE {
        paths: &[(EC2, "spec.securityGroupSelectorTerms[]")],
        rule: "!has(self.id) || !(has(self.tags) || has(self.name))",
        message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        hint: "put the id in its own term",
    }
    EC2_SG_TERM_NAME_EXCLUSIVE {
        paths: &[(EC2, "spec.securityGroupSelectorTerms[]")],
        rule: "!has(self.name) || !(has(self.tags) || has(self.id))",
        message: "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        hint: "put the name in its own term",
    }
    EC2_CR_TERM_NONEMPTY {
        paths: &[(EC2, "spec.capacityReservationSelectorTerms[]")],
        rule: "has(self.tags) || has(self.id) || has(self.instanceMatchCriteria)",
        message: "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        hint: "select reservations by tags, id or instanceMatchCriteria",
    }
    EC2_CR_TERM_ID_EXCLUSIVE {
        paths: &[(EC2, "spec.capacityReservationSelectorTerms[]")],
        rule: "!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))",
        message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a capacity reservation selector term",
        hint: "put the id in its own term",
    }
    EC2_SELECTOR_TAGS_NONEMPTY {
        paths: &[
            (EC2, "spec.subnetSelectorTerms[].tags"),
            (EC2, "spec.securityGroupSelectorTerms[].tags"),
            (EC2, "spec.capacityReservationSelectorTerms[].tags"),
            (EC2, "spec.amiSelectorTerms[].tags"),
        ],
        rule: "self.all(k, k != '' && self[k] != '')",
        message: "empty tag keys or values aren't supported",
        hint: "use \"*\" to match any value of a tag",
    }
    EC2_PLACEMENT_GROUP_ONE_OF {
        paths: &[(EC2, "spec.placementGroupSelector")],
        rule: "has(self.name) != has(self.id)",
        message: "expected exactly one of ['name', 'id']",
        hint: "select the placement group by name or by id",
    }
    EC2_ALIAS_ALONE {
        paths: &[(EC2, "spec.amiSelectorTerms")],
        rule: "!(self.exists(x, has(x.alias)) && self.size() != 1)",
        message: "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        hint: "an alias term must be the only amiSelectorTerm",
    }
    EC2_AMI_TERM_NONEMPTY {
        paths: &[(EC2, "spec.amiSelectorTerms[]")],
        rule: "has(self.alias) || has(self.tags) || has(self.name) || has(self.id) || has(self.ssmParameter)",
        message: "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        hint: "select AMIs with e.g. alias: al2023@latest",
    }
    EC2_AMI_TERM_ID_EXCLUSIVE {
        paths: &[(EC2, "spec.amiSelectorTerms[]")],
        rule: "!has(self.id) || !(has(self.alias) || has(self.tags) || has(self.name) || has(self.owner))",
        message: "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        hint: "put the id in its own term",
    }
    EC2_AMI_TERM_ALIAS_EXCLUSIVE {
        paths: &[(EC2, "spec.amiSelectorTerms[]")],
        rule: "!has(self.alias) || !(has(self.id) || has(self.tags) || has(self.name) || has(self.owner) || has(self.ssmParameter))",
        message: "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        hint: "an alias term has no other fields",
    }
    EC2_ALIAS_FAMILY {
        paths: &[(EC2, "spec.amiSelectorTerms[].alias")],
        rule: "self.find('^[^@]+') in ['al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025']",
        message: "'alias' is improperly formatted, must match the format 'family@version'",
        hint: "family is one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025; e.g. al2023@latest",
    }
    EC2_ALIAS_WINDOWS_LATEST {
        paths: &[(EC2, "spec.amiSelectorTerms[].alias")],
        rule: "self.find('^[^@]+') in ['windows2019', 'windows2022', 'windows2025'] ? self.find('[^@]+$') == 'latest' : true",
        message: "windows families may only specify version 'latest'",
        hint: "use e.g. windows2022@latest",
    }
    EC2_ROLE_NONEMPTY {
        paths: &[(EC2, "spec.role")],
        rule: "self != ''",
        message: "role cannot be empty",
        hint: "name the IAM role of the nodes",
    }
    EC2_INSTANCE_PROFILE_NONEMPTY {
        paths: &[(EC2, "spec.instanceProfile")],
        rule: "self != ''",
        message: "instanceProfile cannot be empty",
        hint: "name an existing instance profile",
    }
    EC2_TAGS_EMPTY_KEY {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, k != '')",
        message: "empty tag keys aren't supported",
        hint: "remove the empty key",
    }
    EC2_TAGS_CLUSTER_NAME {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, k != 'eks:eks-cluster-name')",
        message: "tag contains a restricted tag matching eks:eks-cluster-name",
        hint: "Karpenter sets this tag itself; remove it",
    }
    EC2_TAGS_KUBERNETES_CLUSTER {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, !k.startsWith('kubernetes.io/cluster'))",
        message: "tag contains a restricted tag matching kubernetes.io/cluster/",
        hint: "Karpenter sets this tag itself; remove it",
    }
    EC2_TAGS_NODEPOOL {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, k != 'karpenter.sh/nodepool')",
        message: "tag contains a restricted tag matching karpenter.sh/nodepool",
        hint: "Karpenter sets this tag itself; remove it",
    }
    EC2_TAGS_NODECLAIM {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, k != 'karpenter.sh/nodeclaim')",
        message: "tag contains a restricted tag matching karpenter.sh/nodeclaim",
        hint: "Karpenter sets this tag itself; remove it",
    }
    EC2_TAGS_EC2NODECLASS {
        paths: &[(EC2, "spec.tags")],
        rule: "self.all(k, k != 'karpenter.k8s.aws/ec2nodeclass')",
        message: "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
        hint: "Karpenter sets this tag itself; remove it",
    }
    KUBELET_IMAGE_GC_THRESHOLDS {
        paths: &[(EC2, "spec.kubelet")],
        rule: "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ? self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true",
        message: "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        hint: "e.g. imageGCHighThresholdPercent: 85, imageGCLowThresholdPercent: 80",
    }
    KUBELET_EVICTION_SOFT_HAS_GRACE {
        paths: &[(EC2, "spec.kubelet")],
        rule: "has(self.evictionSoft) ? (has(self.evictionSoftGracePeriod) && self.evictionSoft.all(e, e in self.evictionSoftGracePeriod)) : true",
        message: "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        hint: "give every evictionSoft signal a grace period in evictionSoftGracePeriod",
    }
    KUBELET_GRACE_HAS_EVICTION_SOFT {
        paths: &[(EC2, "spec.kubelet")],
        rule: "has(self.evictionSoftGracePeriod) ? (has(self.evictionSoft) && self.evictionSoftGracePeriod.all(e, e in self.evictionSoft)) : true",
        message: "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        hint: "remove the grace period or add the matching evictionSoft threshold",
    }
    KUBELET_RESERVED_KEYS {
        paths: &[(EC2, "spec.kubelet.kubeReserved"), (EC2, "spec.kubelet.systemReserved")],
        rule: "self.all(x, x == 'cpu' || x == 'memory' || x == 'ephemeral-storage' || x == 'pid')",
        message: "valid keys for kubeReserved and systemReserved are ['cpu','memory','ephemeral-storage','pid']",
        hint: "remove the other keys",
    }
    KUBELET_RESERVED_NOT_NEGATIVE {
        paths: &[(EC2, "spec.kubelet.kubeReserved"), (EC2, "spec.kubelet.systemReserved")],
        rule: "self.all(x, !self[x].startsWith('-'))",
        message: "kubeReserved and systemReserved values cannot be negative resource quantities",
        hint: "use a positive quantity such as 100m or 1Gi",
    }
    KUBELET_EVICTION_KEYS {
        paths: &[
            (EC2, "spec.kubelet.evictionHard"),
            (EC2, "spec.kubelet.evictionSoft"),
            (EC2, "spec.kubelet.evictionSoftGracePeriod"),
        ],
        rule: "self.all(x, x in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",
        message: "valid keys for eviction signals are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
        hint: "use one of the listed eviction signals",
    }
    EC2_ONE_ROOT_VOLUME {
        paths: &[(EC2, "spec.blockDeviceMappings")],
        rule: "self.filter(x, has(x.rootVolume) ? x.rootVolume == true : false).size() <= 1",
        message: "must have only one blockDeviceMappings with rootVolume",
        hint: "mark a single mapping with rootVolume: true",
    }
    EC2_EBS_SNAPSHOT_OR_SIZE {
        paths: &[(EC2, "spec.blockDeviceMappings[].ebs")],
        rule: "has(self.snapshotID) || has(self.volumeSize)",
        message: "snapshotID or volumeSize must be defined",
        hint: "set ebs.volumeSize (e.g. 100Gi) or ebs.snapshotID",
    }
    EC2_EBS_INIT_RATE_NEEDS_SNAPSHOT {
        paths: &[(EC2, "spec.blockDeviceMappings[].ebs")],
        rule: "!has(self.volumeInitializationRate) || has(self.snapshotID)",
        message: "volumeInitializationRate must be used with snapshotID",
        hint: "set ebs.snapshotID or remove volumeInitializationRate",
    }
    EC2_NETWORK_PRIMARY {
        paths: &[(EC2, "spec.networkInterfaces")],
        rule: "self.exists(x, x.networkCardIndex == 0 && x.deviceIndex == 0 && x.interfaceType == 'interface')",
        message: "networkInterfaces must include a primary interface (networkCardIndex 0, deviceIndex 0, interfaceType interface)",
        hint: "add {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}",
    }
    EC2_NETWORK_UNIQUE {
        paths: &[(EC2, "spec.networkInterfaces")],
        rule: "self.all(x, self.exists_one(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex))",
        message: "networkInterfaces must not repeat a (networkCardIndex, deviceIndex) pair",
        hint: "remove the duplicate interface",
    }
    EC2_NETWORK_ONE_EFA_PER_CARD {
        paths: &[(EC2, "spec.networkInterfaces")],
        rule: "self.all(x, x.interfaceType != 'efa-only' || self.exists_one(y, y.networkCardIndex == x.networkCardIndex && y.interfaceType == 'efa-only'))",
        message: "networkInterfaces may have at most one efa-only interface per network card",
        hint: "remove the extra efa-only interface",
    }
    EC2_CONNECTION_TRACKING_NONEMPTY {
        paths: &[(EC2, "spec.connectionTracking")],
        rule: "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
        message: "expected at least one, got none, ['tcpEstablishedTimeout', 'udpStreamTimeout', 'udpTimeout']",
        hint: "set a timeout or remove connectionTracking",
    }
    // ---- NodeOverlay (upstream's v1alpha1 markers) --------------------------------------------
    NO_PRICE_XOR_ADJUSTMENT {
        paths: &[(NO, "spec")],
        rule: "!has(self.price) || !has(self.priceAdjustment)",
        message: "cannot set both 'price' and 'priceAdjustment'",
        hint: "keep price (a replacement) or priceAdjustment (a change), not both",
    }
    NO_REQ_NOT_IN_HAS_VALUES {
        paths: &[(NO, "spec.requirements")],
        rule: "self.all(x, x.operator == 'NotIn' ? (has(x.values) && x.values.size() != 0) : true)",
        message: "requirements with operator 'NotIn' must have a value defined",
        hint: "add at least one value, or use operator DoesNotExist",
    }
    NO_CAPACITY_RESTRICTED {
        paths: &[(NO, "spec.capacity")],
        rule: "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
        message: "invalid resource restricted",
        hint: "capacity only adds extended resources (e.g. hugepages-2Mi, example.com/device); cpu, memory, ephemeral-storage and pods come from the instance type",
    }
    // ---- CapacityBuffer (autoscaling.x-k8s.io/v1beta1, shared with Cluster Autoscaler) --------
    CB_TEMPLATE_NEEDS_SIZE {
        paths: &[(CB, "spec")],
        rule: "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
        message: "If podTemplateRef is set, replicas or limits must also be set",
        hint: "set spec.replicas (how many chunks) or spec.limits (as many chunks as fit)",
    }
    CB_ONE_REF {
        paths: &[(CB, "spec")],
        rule: "!(has(self.podTemplateRef) && has(self.scalableRef))",
        message: "You must define either PodTemplateRef or ScalableRef, but not both",
        hint: "keep podTemplateRef (a PodTemplate's shape) or scalableRef (a workload's shape), not both",
    }

}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_a_path_and_a_message() {
        assert!(ALL.len() >= 50);
        for rule in ALL {
            assert!(!rule.paths.is_empty(), "{}", rule.rule);
            assert!(
                !rule.message.is_empty() && !rule.hint.is_empty(),
                "{}",
                rule.rule
            );
        }
    }
}
