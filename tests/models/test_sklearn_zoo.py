"""scikit-learn models as skl2onnx writes them, run by epoxy (cpu) and by onnxruntime on the
same inputs. Every model is fitted here on small seeded data: nothing is downloaded.

Classifiers come in four label variants (binary / multiclass, integer / string classes) and
with skl2onnx's default options, so their probabilities leave as ZipMap's list of dicts;
LogisticRegression also runs with ``{"zipmap": False}`` (a plain probability tensor).
A case that fails on epoxy today is a strict xfail naming why (see docs/MODEL_ZOO.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from zoo_harness import Built, Case, check_case, check_openvino_case, classification, params, regression, with_missing

import epoxy

# SVC(probability=True) is deprecated in scikit-learn 1.9 (removed in 1.11); it is what users' models hold
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning:sklearn"),
              pytest.mark.filterwarnings("ignore:Stochastic Optimizer. Maximum iterations")]  # the small MLPs

SEED = 0
LABELS = (("binary", 2, "int"), ("binary", 2, "str"), ("multiclass", 3, "int"), ("multiclass", 3, "str"))


def _to_onnx(model: Any, x: Any, **kw: Any) -> Any:
    from skl2onnx import to_onnx

    return to_onnx(model, x, **kw)


# --------------------------------------------------------------------------- classifiers


def _classifier(make: Callable[[], Any], n_classes: int, labels: str, options: dict[str, Any] | None,
                dtype: type = np.float32, missing: bool = False) -> Callable[[], Built]:
    def build() -> Built:
        x, y, x_test = classification(n_classes, labels, seed=SEED)
        x, x_test = x.astype(dtype), x_test.astype(dtype)
        if missing:
            x, x_test = with_missing(x, 0.15, SEED), with_missing(x_test, 0.3, SEED + 1)
        model = make().fit(x, y)
        onx = _to_onnx(model, x[:1], options={id(model): options} if options else None)
        return Built(onx, {"X": x_test})

    return build


def _logistic() -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000)


def _linear_svc() -> Any:
    from sklearn.svm import LinearSVC

    return LinearSVC(random_state=SEED)


def _svc() -> Any:
    from sklearn.svm import SVC

    return SVC(probability=True, random_state=SEED)


def _forest_classifier() -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=7, max_depth=5, random_state=SEED)


def _boosting_classifier() -> Any:
    from sklearn.ensemble import GradientBoostingClassifier

    return GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=SEED)


def _svc_default() -> Any:
    from sklearn.svm import SVC

    return SVC(random_state=SEED)


def _decision_tree_classifier() -> Any:
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(max_depth=5, random_state=SEED)


def _gaussian_nb() -> Any:
    from sklearn.naive_bayes import GaussianNB

    return GaussianNB()


def _mlp_classifier() -> Any:
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=(16,), max_iter=300, random_state=SEED)


def _scaled_logistic() -> Any:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), _logistic())


def _knn_classifier() -> Any:
    from sklearn.neighbors import KNeighborsClassifier

    return KNeighborsClassifier(n_neighbors=5)


#: (id prefix, title, factory, skl2onnx options, how the scores leave the model)
CLASSIFIERS: list[tuple[str, str, Callable[[], Any], dict[str, Any] | None, str]] = [
    ("logreg", "LogisticRegression", _logistic, None, "ZipMap"),
    ("logreg_nozipmap", "LogisticRegression", _logistic, {"zipmap": False}, "zipmap=False"),
    ("linear_svc", "LinearSVC", _linear_svc, None, "scores tensor (no predict_proba, so no ZipMap)"),
    ("svc_proba", "SVC(probability=True)", _svc, None, "ZipMap"),
    ("random_forest_clf", "RandomForestClassifier", _forest_classifier, None, "ZipMap"),
    ("gradient_boosting_clf", "GradientBoostingClassifier", _boosting_classifier, None, "ZipMap"),
    ("knn_clf", "KNeighborsClassifier", _knn_classifier, None, "ZipMap"),
]


def _classifier_cases() -> list[Case]:
    """Every classifier in the four label variants, with skl2onnx's default options."""
    cases = []
    for key, title, make, options, scores in CLASSIFIERS:
        for kind, n_classes, labels in LABELS:
            cases.append(Case(f"{key}-{kind}-{labels}", "skl2onnx", title, f"{kind}, {labels} labels, {scores}",
                              _classifier(make, n_classes, labels, options)))
    return cases


# one label variant each: common models beyond the brief's list, and float64 inputs (what
# ``to_onnx(model, X)`` writes for a float64 X, e.g. straight from a DataFrame)
MORE_CLASSIFIERS = [
    Case("svc-binary-str", "skl2onnx", "SVC (rbf, no probability)", "binary, str labels, ZipMap",
         _classifier(_svc_default, 2, "str", None)),
    Case("svc-multiclass-int", "skl2onnx", "SVC (rbf, no probability)", "multiclass, int labels, ZipMap",
         _classifier(_svc_default, 3, "int", None)),
    Case("decision_tree_clf-multiclass-str", "skl2onnx", "DecisionTreeClassifier", "multiclass, str labels, ZipMap",
         _classifier(_decision_tree_classifier, 3, "str", None)),
    Case("gaussian_nb-multiclass-int", "skl2onnx", "GaussianNB", "multiclass, int labels, ZipMap",
         _classifier(_gaussian_nb, 3, "int", None)),
    Case("mlp_clf-multiclass-str", "skl2onnx", "MLPClassifier", "multiclass, str labels, ZipMap",
         _classifier(_mlp_classifier, 3, "str", None)),
    Case("scaler_logreg-binary-str", "skl2onnx", "Pipeline(StandardScaler, LogisticRegression)",
         "binary, str labels, ZipMap", _classifier(_scaled_logistic, 2, "str", None)),
    Case("random_forest_clf-multiclass-str-nan", "skl2onnx", "RandomForestClassifier",
         "multiclass, str labels, NaN in training and inputs, ZipMap",
         _classifier(_forest_classifier, 3, "str", None, missing=True)),
    Case("random_forest_clf-multiclass-int-float64", "skl2onnx", "RandomForestClassifier",
         "multiclass, int labels, float64 input, ZipMap", _classifier(_forest_classifier, 3, "int", None, np.float64)),
]


# --------------------------------------------------------------------------- regressors


def _regressor(make: Callable[[], Any], n_targets: int = 1, dtype: type = np.float32,
               missing: bool = False) -> Callable[[], Built]:
    def build() -> Built:
        x, y, x_test = regression(n_targets=n_targets, seed=SEED)
        x, x_test = x.astype(dtype), x_test.astype(dtype)
        if missing:
            x, x_test = with_missing(x, 0.15, SEED), with_missing(x_test, 0.3, SEED + 1)
        model = make().fit(x, y)
        return Built(_to_onnx(model, x[:1]), {"X": x_test})

    return build


def _linear_regression() -> Any:
    from sklearn.linear_model import LinearRegression

    return LinearRegression()


def _ridge() -> Any:
    from sklearn.linear_model import Ridge

    return Ridge(alpha=0.5)


def _svr() -> Any:
    from sklearn.svm import SVR

    return SVR(C=10.0)


def _forest_regressor() -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=7, max_depth=5, random_state=SEED)


def _boosting_regressor() -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=SEED)


def _mlp_regressor() -> Any:
    from sklearn.neural_network import MLPRegressor

    return MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=SEED)


def _decision_tree_regressor() -> Any:
    from sklearn.tree import DecisionTreeRegressor

    return DecisionTreeRegressor(max_depth=5, random_state=SEED)


def _knn_regressor() -> Any:
    from sklearn.neighbors import KNeighborsRegressor

    return KNeighborsRegressor(n_neighbors=5)


REGRESSORS = [
    Case("linear_regression", "skl2onnx", "LinearRegression", "1 target", _regressor(_linear_regression)),
    Case("linear_regression-2targets", "skl2onnx", "LinearRegression", "2 targets", _regressor(_linear_regression, 2)),
    Case("ridge", "skl2onnx", "Ridge", "1 target", _regressor(_ridge)),
    Case("svr", "skl2onnx", "SVR (rbf)", "1 target", _regressor(_svr)),
    Case("random_forest_reg", "skl2onnx", "RandomForestRegressor", "1 target", _regressor(_forest_regressor)),
    Case("random_forest_reg-2targets", "skl2onnx", "RandomForestRegressor", "2 targets",
         _regressor(_forest_regressor, 2)),
    Case("gradient_boosting_reg", "skl2onnx", "GradientBoostingRegressor", "1 target", _regressor(_boosting_regressor)),
    Case("knn_reg", "skl2onnx", "KNeighborsRegressor", "1 target", _regressor(_knn_regressor)),
    Case("mlp_reg", "skl2onnx", "MLPRegressor", "1 target", _regressor(_mlp_regressor)),
    Case("decision_tree_reg-nan", "skl2onnx", "DecisionTreeRegressor", "1 target, NaN in training and inputs",
         _regressor(_decision_tree_regressor, missing=True)),
    Case("linear_regression-float64", "skl2onnx", "LinearRegression", "1 target, float64 input",
         _regressor(_linear_regression, dtype=np.float64)),
]


# --------------------------------------------------------------------------- unsupervised, transformers


def _fitted_on_features(make: Callable[[], Any], *, nan: bool = False,
                        target_opset: dict[str, int] | None = None) -> Callable[[], Built]:
    def build() -> Built:
        x, _, x_test = classification(3, "int", seed=SEED)
        if nan:  # a few missing values in training and test rows
            rng = np.random.default_rng(SEED)
            x, x_test = x.copy(), x_test.copy()
            x[rng.random(x.shape) < 0.1] = np.nan
            x_test[rng.random(x_test.shape) < 0.2] = np.nan
        model = make().fit(x)
        return Built(_to_onnx(model, x[:1], target_opset=target_opset), {"X": x_test})

    return build


def _kmeans() -> Any:
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=3, n_init=3, random_state=SEED)


def _pca() -> Any:
    from sklearn.decomposition import PCA

    return PCA(n_components=3, random_state=SEED)


def _normalizer(norm: str) -> Callable[[], Any]:
    def make() -> Any:
        from sklearn.preprocessing import Normalizer

        return Normalizer(norm=norm)

    return make


def _imputer(strategy: str) -> Callable[[], Any]:
    def make() -> Any:
        from sklearn.impute import SimpleImputer

        return SimpleImputer(strategy=strategy)

    return make


def _min_max_scaler() -> Any:
    from sklearn.preprocessing import MinMaxScaler

    return MinMaxScaler()


def _standard_scaler() -> Any:
    from sklearn.preprocessing import StandardScaler

    return StandardScaler()


def _isolation_forest() -> Any:
    from sklearn.ensemble import IsolationForest

    return IsolationForest(n_estimators=10, random_state=SEED)


TRANSFORMERS = [
    Case("kmeans", "skl2onnx", "KMeans", "3 clusters (label, distances)", _fitted_on_features(_kmeans)),
    Case("pca", "skl2onnx", "PCA", "3 components", _fitted_on_features(_pca)),
    Case("normalizer-l1", "skl2onnx", "Normalizer", "l1", _fitted_on_features(_normalizer("l1"))),
    Case("normalizer-l2", "skl2onnx", "Normalizer", "l2", _fitted_on_features(_normalizer("l2"))),
    Case("normalizer-max", "skl2onnx", "Normalizer", "max", _fitted_on_features(_normalizer("max"))),
    Case("simple_imputer-mean", "skl2onnx", "SimpleImputer", "mean, NaN inputs",
         _fitted_on_features(_imputer("mean"), nan=True)),
    Case("simple_imputer-median", "skl2onnx", "SimpleImputer", "median, NaN inputs",
         _fitted_on_features(_imputer("median"), nan=True)),
    Case("standard_scaler", "skl2onnx", "StandardScaler", "", _fitted_on_features(_standard_scaler)),
    Case("min_max_scaler", "skl2onnx", "MinMaxScaler", "", _fitted_on_features(_min_max_scaler)),
    # skl2onnx's default (ai.onnx.ml 4 for LabelEncoder) fails inside skl2onnx itself and asks
    # for target_opset={'ai.onnx.ml': 3}: what a user then passes
    Case("isolation_forest", "skl2onnx", "IsolationForest", "10 trees (label, scores), ai.onnx.ml 3",
         _fitted_on_features(_isolation_forest, target_opset={"": 22, "ai.onnx.ml": 3})),
]


# --------------------------------------------------------------------------- pipelines


def _frame(seed: int, n: int) -> Any:
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "city": rng.choice(["paris", "oslo", "lima", "cairo"], n),
        "age": rng.normal(40, 12, n).astype(np.float32),
        "income": rng.normal(3000, 800, n).astype(np.float32),
    })


def _column_transformer(with_classifier: bool) -> Callable[[], Built]:
    def build() -> Built:
        pytest.importorskip("pandas", reason="pandas is not installed: the ColumnTransformer cases use a DataFrame")
        from sklearn.compose import ColumnTransformer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        train, test = _frame(SEED, 160), _frame(SEED + 1, 24)
        test.loc[3, "city"] = "rome"  # a category unseen in training: all zeros (handle_unknown="ignore")
        columns = ColumnTransformer([("city", OneHotEncoder(handle_unknown="ignore"), ["city"]),
                                     ("num", StandardScaler(), ["age", "income"])])
        if with_classifier:
            y = np.where((train["city"] == "oslo") | (train["age"] > 45), "yes", "no")
            model = Pipeline([("columns", columns), ("clf", LogisticRegression(max_iter=1000))]).fit(train, y)
        else:
            model = columns.fit(train)
        onx = _to_onnx(model, train[:1])
        feeds = {name: test[[name]].to_numpy().astype(np.float32 if name != "city" else object)
                 for name in ("city", "age", "income")}
        return Built(onx, feeds)

    return build


def _dict_vectorizer() -> Built:
    """One map per run: onnxruntime feeds a single dict to a map(string, float) input."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(SEED)
    keys = ["height", "weight", "age", "score"]

    def rows(n: int) -> list[dict[str, float]]:
        return [{k: float(rng.normal()) for k in keys if rng.random() < 0.8} for _ in range(n)]

    train = rows(120)
    y = np.array(["small" if r.get("height", 0.0) + r.get("weight", 0.0) < 0 else "large" for r in train])
    model = Pipeline([("dict", DictVectorizer(sparse=False)), ("clf", LogisticRegression())]).fit(train, y)
    onx = convert_sklearn(model, initial_types=[("X", DictionaryType(StringTensorType([1]), FloatTensorType([1])))])
    # "age" missing (a 0 column), "colour" never seen in training (ignored)
    return Built(onx, {"X": {"height": 0.5, "weight": -1.25, "score": 2.0, "colour": 3.0}})


CORPUS = [
    "the cat sat on the mat", "a dog barked at the cat", "stocks fell as markets opened",
    "the market rallied on strong earnings", "my dog likes the park", "bond yields rose again today",
    "cats and dogs are pets", "investors sold shares in the morning", "the park was full of dogs",
    "earnings beat forecasts, shares rose",
] * 4
TOPICS = ["pets", "pets", "money", "money", "pets", "money", "pets", "money", "pets", "money"] * 4
TEXTS = ["the dog sat in the park", "shares and bonds fell", "a cat, a dog and a market"]


def _tfidf(options: dict[str, Any]) -> Callable[[], Built]:
    def build() -> Built:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import StringTensorType
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        model = Pipeline([("tfidf", TfidfVectorizer()), ("clf", LogisticRegression())]).fit(CORPUS, TOPICS)
        # StringNormalizer's default locale (en_US.UTF-8) makes onnxruntime fail where that
        # locale is not installed; "C" exists everywhere
        onx = convert_sklearn(model, initial_types=[("X", StringTensorType([None, 1]))],
                              options={TfidfVectorizer: {"locale": "C", **options}})
        return Built(onx, {"X": np.array(TEXTS, dtype=object).reshape(-1, 1)})

    return build


def _around_tokenizer(options: dict[str, Any], part: str) -> Callable[[], Built]:
    """The exported TF-IDF model cut at its Tokenizer: ``"before"`` is the part up to the
    Tokenizer's input (Reshape, StringNormalizer), ``"after"`` the part from its output on,
    fed the tokens onnxruntime's Tokenizer makes. Together they check every op but the one
    epoxy lacks."""

    def build() -> Built:
        import onnx
        import onnxruntime as ort
        from onnx import helper

        whole = _tfidf(options)()
        graph = whole.model.graph
        (tokenizer,) = [n for n in graph.node if n.op_type == "Tokenizer"]
        if part == "before":
            wanted, nodes = {tokenizer.input[0]}, []
            for node in reversed(graph.node):
                if node is not tokenizer and set(node.output) & wanted:
                    nodes.insert(0, node)
                    wanted.update(node.input)
            inputs = list(graph.input)
            outputs = [helper.make_tensor_value_info(tokenizer.input[0], onnx.TensorProto.STRING, [None])]
            feeds = whole.feeds
        else:
            live, nodes = {tokenizer.output[0]}, []
            for node in graph.node:
                if set(node.input) & live:
                    nodes.append(node)
                    live.update(node.output)
            inputs = [helper.make_tensor_value_info(tokenizer.output[0], onnx.TensorProto.STRING, [None, None])]
            outputs = list(graph.output)
            probe = onnx.ModelProto()
            probe.CopyFrom(whole.model)
            probe.graph.output.append(helper.make_tensor_value_info(tokenizer.output[0], onnx.TensorProto.STRING, None))
            reference = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
            feeds = {tokenizer.output[0]: reference.run([tokenizer.output[0]], whole.feeds)[0]}
        used = {name for node in nodes for name in node.input}
        cut = helper.make_graph(nodes, f"{graph.name}_{part}_tokenizer", inputs, outputs,
                                [init for init in graph.initializer if init.name in used])
        model = helper.make_model(cut, opset_imports=list(whole.model.opset_import))
        model.ir_version = whole.model.ir_version
        return Built(model, feeds)

    return build


PIPELINES = [
    Case(
        "column_transformer",
        "skl2onnx",
        "ColumnTransformer(OneHotEncoder, StandardScaler)",
        "DataFrame: 1 string + 2 float columns",
        _column_transformer(False),
    ),
    Case(
        "column_transformer-logreg",
        "skl2onnx",
        "Pipeline(ColumnTransformer, LogisticRegression)",
        "DataFrame, str labels, ZipMap",
        _column_transformer(True),
    ),
    Case(
        "dict_vectorizer-logreg",
        "skl2onnx",
        "Pipeline(DictVectorizer, LogisticRegression)",
        "map(string, float) input with a missing and an unseen key, str labels, ZipMap",
        _dict_vectorizer,
    ),
    Case(
        "tfidf-logreg",
        "skl2onnx",
        "Pipeline(TfidfVectorizer, LogisticRegression)",
        "default options (Tokenizer with skl2onnx's default tokenexp), str labels, ZipMap",
        _tfidf({}),
    ),
    Case(
        "tfidf-logreg-tokenexp",
        "skl2onnx",
        "Pipeline(TfidfVectorizer, LogisticRegression)",
        "tokenexp option (Tokenizer with sklearn's regex), str labels, ZipMap",
        _tfidf({"tokenexp": ""}),
    ),
    Case(
        "tfidf-logreg-before-tokenizer",
        "skl2onnx",
        "Pipeline(TfidfVectorizer, LogisticRegression)",
        "default options, cut: input to the Tokenizer's input",
        _around_tokenizer({}, "before"),
    ),
    Case(
        "tfidf-logreg-after-tokenizer",
        "skl2onnx",
        "Pipeline(TfidfVectorizer, LogisticRegression)",
        "default options, cut: onnxruntime's Tokenizer output to the end",
        _around_tokenizer({}, "after"),
    ),
    Case(
        "tfidf-logreg-tokenexp-after-tokenizer",
        "skl2onnx",
        "Pipeline(TfidfVectorizer, LogisticRegression)",
        "tokenexp option, cut: onnxruntime's Tokenizer output to the end",
        _around_tokenizer({"tokenexp": ""}, "after"),
    ),
]

CASES = _classifier_cases() + MORE_CLASSIFIERS + REGRESSORS + TRANSFORMERS + PIPELINES


@pytest.mark.parametrize("case", params(CASES))
def test_sklearn_model_matches_onnxruntime(case: Case, tmp_path: Path) -> None:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("skl2onnx", reason="skl2onnx is not installed")
    pytest.importorskip("onnxruntime", reason="onnxruntime (the reference) is not installed")
    check_case(case, tmp_path)


@pytest.mark.parametrize("case", params(CASES, openvino=True))
def test_sklearn_model_on_openvino_matches_onnxruntime(case: Case, tmp_path: Path) -> None:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("skl2onnx", reason="skl2onnx is not installed")
    pytest.importorskip("onnxruntime", reason="onnxruntime (the reference) is not installed")
    pytest.importorskip("epoxy_ep_openvino", reason="ep-openvino is not installed")
    check_openvino_case(case, tmp_path)


def test_epoxy_is_the_one_under_test() -> None:
    """The zoo compares epoxy's ep-cpu with onnxruntime, not onnxruntime with itself."""
    assert "cpu" in epoxy.get_available_providers()
