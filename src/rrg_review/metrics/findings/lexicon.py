"""The words the finding extractor knows, as data: observations and their synonyms, the NegEx-style
triggers of negation and uncertainty, and the modifiers (side, zone, severity, change).

Why tables rather than a library: medspaCy pins spaCy < 3.8 and with it numpy < 2 (pip's
resolver on our venv: medspacy 1.3.1 would install numpy 1.26.4 over our 2.x), so it does not
fit. negspaCy 1.1.0 does fit (spaCy 3.8, ~15 compiled packages), but it negates only (no
uncertainty: "may represent", "cannot be excluded" need a second scope anyway), it needs the
entities from a spaCy matcher fed with exactly these synonym tables, and spaCy's import would
cost the CLI and the review page a second or more for a ~40-line scope. So the scope is ours
(NegEx's pre/post triggers, pseudo-triggers and terminators, Chapman et al. 2001), and the
trigger lists are kept here, in one place, to be read and extended.

Phrases are written as normalised tokens: lower case, singular (`extract.normalise` maps
"effusions" to "effusion", "opacities" to "opacity"), hyphens as spaces ("air-space" is "air
space"). Longer phrases win over shorter ones at the same place.
"""

from __future__ import annotations

# observation key -> phrases that name it. The keys are what crosses modules (a suggestion's
# "observation"); they follow the CheXpert/ReXVal wording where one exists.
OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "effusion": ("effusion", "pleural effusion", "pleural fluid", "hydrothorax",
                 "fluid in the pleural space"),
    "pneumothorax": ("pneumothorax", "pleural air", "pleural air collection", "hydropneumothorax"),
    "consolidation": ("consolidation", "airspace disease", "air space disease",
                      "airspace consolidation", "air space consolidation", "airspace opacity",
                      "air space opacity", "infiltrate", "infiltration", "alveolar consolidation",
                      "alveolar opacity", "airspace process", "air space process",
                      "airspace density", "air space density",
                      "consolidative opacity", "alveolar infiltrate", "airspace infiltrate"),
    "opacity": ("opacity", "density", "opacification", "haziness", "hazy opacity",
                "ground glass", "ground glass opacity"),
    "nodule": ("nodule", "mass", "nodular opacity", "nodular density", "lesion", "nodular",
               "pulmonary nodule", "lung nodule", "masslike", "mass like", "tumor", "neoplasm",
               "metastasis", "metastatic disease",
               # a nodule is a rounded opacity (the Fleischner glossary's own words): "rounded
               # opacities" against "nodular opacities" were flagged as two findings, each
               # missing from the other report (a new-user trial, on every demo study)
               "rounded opacity", "round opacity", "rounded density", "round density"),
    "granuloma": ("granuloma", "granulomatous disease", "granulomatous", "calcified granuloma",
                  "granulomata", "calcified nodule", "calcified lymph node"),
    "calcification": ("calcification", "calcified", "calcified density", "calcific density",
                      "calcific"),
    "cardiomegaly": ("cardiomegaly", "cardiac enlargement", "enlarged heart",
                     "enlargement of the cardiac silhouette", "enlarged cardiac silhouette",
                     "cardiomediastinal enlargement", "enlarged cardiomediastinal silhouette"),
    "edema": ("edema", "pulmonary edema", "interstitial edema", "alveolar edema",
              "kerley b line", "kerley line", "b line", "fluid overload"),
    "congestion": ("vascular congestion", "pulmonary vascular congestion", "congestion",
                   "venous congestion", "pulmonary venous congestion", "cephalization",
                   "venous hypertension", "pulmonary venous hypertension"),
    "atelectasis": ("atelectasis", "atelectatic", "atelectatic change", "volume loss",
                    "collapse", "subsegmental atelectasis", "platelike atelectasis",
                    "discoid atelectasis", "linear atelectasis"),
    "fracture": ("fracture", "fractured", "fx", "rib fracture", "compression deformity",
                 "compression fracture"),
    "lines_tubes": ("catheter", "tube", "endotracheal tube", "picc", "picc line", "central line",
                    "central venous catheter", "venous catheter", "pacemaker", "pacer",
                    "pacemaker lead", "pacer lead", "lead", "port", "chest tube", "drain",
                    "enteric tube", "feeding tube", "nasogastric tube", "ng tube", "et tube",
                    "og tube", "defibrillator", "aicd", "icd", "swan ganz", "stent",
                    "generator", "dialysis catheter", "venous line", "arterial line",
                    "dialysis line", "jugular line", "subclavian line"),
    "pneumonia": ("pneumonia", "pneumonitis", "bronchopneumonia", "infection",
                  "infectious process"),
    "emphysema": ("emphysema", "emphysematous", "emphysematous change", "copd",
                  "chronic obstructive pulmonary disease", "obstructive pulmonary disease",
                  "bullae", "bulla", "bullous"),
    "hyperinflation": ("hyperinflation", "hyperinflated", "hyperexpanded", "hyperexpansion",
                       "hyperaeration", "hyperaerated", "overinflation", "overinflated"),
    "subcutaneous_emphysema": ("subcutaneous emphysema", "subcutaneous air",
                               "soft tissue emphysema", "soft tissue air"),
    "hernia": ("hernia", "hiatal hernia", "hiatus hernia", "diaphragmatic hernia"),
    "scarring": ("scar", "scarring", "fibrosis", "fibrotic", "fibrotic change", "fibrotic scarring",
                 "cicatricial"),
    "interstitial": ("interstitial marking", "interstitial opacity", "interstitial disease",
                     "interstitial prominence", "reticular", "reticular opacity", "reticulonodular",
                     "interstitial lung disease", "interstitial pattern", "interstitial change",
                     "interstitial thickening", "reticulation", "interstitial density"),
    "pleural_thickening": ("pleural thickening", "pleural plaque", "thickening of the pleura",
                           "pleural calcification", "apical cap", "pleural scarring"),
    "degenerative": ("degenerative change", "degenerative disease", "spondylosis", "osteophyte",
                     "arthritic change", "degenerative", "osteoarthritis", "arthritis",
                     "spondylotic change", "osteophytosis", "degeneration"),
    "tortuosity": ("tortuous", "tortuosity", "ectasia", "ectatic", "unfolding", "unfolded",
                   "tortuous aorta", "aortic tortuosity"),
    "atherosclerosis": ("atherosclerotic", "atherosclerosis", "aortic calcification",
                        "calcified aorta", "aortic atherosclerosis", "vascular calcification",
                        "atherosclerotic calcification", "aortic knob calcification"),
    "adenopathy": ("adenopathy", "lymphadenopathy", "hilar adenopathy", "enlarged lymph node",
                   "mediastinal adenopathy", "lymph node enlargement"),
    "low_volumes": ("low lung volume", "hypoinflation", "hypoventilation", "hypoventilatory",
                    "diminished lung volume", "decreased lung volume", "reduced lung volume",
                    "low volume", "poor inspiration", "shallow inspiration",
                    "hypoinflated", "underinflation"),
    "scoliosis": ("scoliosis", "scoliotic", "curvature of the spine", "spinal curvature"),
    "kyphosis": ("kyphosis", "kyphotic", "kyphoscoliosis"),
    "sternotomy": ("sternotomy", "median sternotomy", "sternotomy wire", "cabg",
                   "coronary artery bypass", "cardiac surgery", "valve replacement"),
    "surgical_clips": ("surgical clip", "clip", "surgical staple", "suture", "postsurgical change",
                       "post surgical change", "postoperative change", "post operative change"),
    "pneumoperitoneum": ("pneumoperitoneum", "free air", "free intraperitoneal air",
                         "free subdiaphragmatic air"),
    "mediastinal_widening": ("widened mediastinum", "mediastinal widening",
                             "mediastinal enlargement", "widening of the mediastinum",
                             "widened mediastinal silhouette"),
    "cavity": ("cavity", "cavitation", "cavitary", "cavitary lesion"),
    "bronchial_thickening": ("bronchial wall thickening", "peribronchial thickening",
                             "peribronchial cuffing", "bronchiectasis", "bronchitis",
                             "airway disease", "bronchial thickening"),
    "elevated_diaphragm": ("elevated hemidiaphragm", "elevation of the hemidiaphragm",
                           "hemidiaphragm elevation", "eventration", "elevated diaphragm",
                           "diaphragmatic elevation", "elevated right hemidiaphragm",
                           "elevated left hemidiaphragm"),
    "hilar_prominence": ("hilar prominence", "prominent hila", "prominent hilum",
                         "hilar enlargement", "enlarged hila", "enlarged hilum",
                         "prominent hilar"),
}

# findings named by a subject and a state word apart ("the heart is mildly enlarged", "the right
# hemidiaphragm remains elevated"): (observation, subject words, state words)
HEART_WORDS = frozenset({"heart", "cardiac", "cardiomediastinal", "cardiopericardial"})
ENLARGED_WORDS = frozenset({"enlarged", "enlargement", "large", "prominent"})
SPLIT_FINDINGS = (
    ("cardiomegaly", HEART_WORDS, ENLARGED_WORDS),
    ("elevated_diaphragm", frozenset({"hemidiaphragm", "diaphragm", "hemidiaphragms"}),
     frozenset({"elevated", "elevation", "raised", "high"})),
    ("mediastinal_widening", frozenset({"mediastinum", "mediastinal"}),
     frozenset({"widened", "widening", "wide"})),
)

# NegEx triggers (normalised tokens). Pre-triggers scope forward, post-triggers backward, both
# to the clause's end (a terminator or the sentence's end). Pseudo-triggers look like triggers
# but negate nothing ("no change"); they are consumed first.
PSEUDO = ("no change", "no interval change", "no significant change",
          "no significant interval change", "not changed", "not significantly changed",
          "without change", "without interval change", "no increase", "no decrease",
          "not only", "gram negative", "no further", "not increased", "not decreased",
          "no appreciable change", "not well seen", "not well visualized", "no longer")
PRE_NEGATION = ("no", "not", "without", "negative for", "free of", "absence of", "absent",
                "no evidence of", "no sign of", "no finding of", "nor", "neither", "never",
                "rather than", "resolution of", "clear of", "no definite", "no convincing",
                "no suspicious", "no visible", "no focal", "no acute", "denies", "negative",
                "none", "resolved")
POST_NEGATION = ("not seen", "not identified", "not present", "not visualized",
                 "not demonstrated", "not evident", "not appreciated", "not noted",
                 "not detected", "not apparent", "absent", "resolved", "has resolved",
                 "have resolved", "ruled out", "excluded", "is excluded", "free", "negative",
                 "cleared", "has cleared", "have cleared", "gone", "no longer seen",
                 "no longer present", "no longer visualized", "no longer", "none",
                 "removed", "has been removed", "have been removed")
PRE_UNCERTAIN = ("possible", "possibly", "probable", "probably", "may", "might", "could",
                 "questionable", "question of", "suspicious for", "suspect", "suspected",
                 "suggestive of", "suggesting", "suggests", "suggest", "to suggest",
                 "concerning for", "concern for", "likely", "most likely", "cannot exclude",
                 "can not exclude",
                 "cannot rule out", "can not rule out", "differential", "equivocal",
                 "consider", "presumably", "presumed", "borderline", "versus", "vs",
                 "perhaps", "worrisome for", "raising the possibility", "indeterminate",
                 "may represent", "could represent", "may reflect", "could reflect",
                 "may be", "could be", "not excluded", "not entirely excluded", "uncertain",
                 "question", "or", "and or")
POST_UNCERTAIN = ("cannot be excluded", "can not be excluded", "not excluded",
                  "cannot be ruled out", "can not be ruled out", "not ruled out",
                  "not entirely excluded", "cannot entirely be excluded",
                  "cannot be entirely excluded", "is possible", "is suspected",
                  "is questioned", "versus", "vs", "or", "is not excluded",
                  "could not be excluded", "not be excluded", "and or")
# ends a trigger's scope: conjunctions that start another statement
TERMINATORS = ("but", "however", "although", "though", "yet", "except", "aside from",
               "apart from", "which", "whereas", "otherwise", ";", ":", "there is",
               "there are", "there has been", "nevertheless", "still", "while",
               "other than", "secondary to", "due to", "because of")
# uncertainty triggers that lose to a negation in scope ("no effusion or pneumothorax")
WEAK_UNCERTAIN = ("or", "and or", "suggest", "to suggest")

# modifiers: word -> normalised value
LATERALITY = {"right": "right", "left": "left", "bilateral": "bilateral",
              "bilaterally": "bilateral", "both": "bilateral", "bibasilar": "bilateral",
              "bibasal": "bilateral", "biapical": "bilateral", "bilat": "bilateral",
              "rt": "right", "lt": "left", "dextro": "right"}
# zones: upper lobe and apex are one zone, lower lobe and base another (a reader writing "right
# base" for "right lower lobe" corrects no location)
ZONES = {"upper": "upper", "apex": "upper", "apical": "upper", "biapical": "upper",
         "apicoposterior": "upper", "middle": "middle", "mid": "middle", "midlung": "middle",
         "lingula": "middle", "lingular": "middle", "lower": "lower", "base": "lower",
         "basilar": "lower", "basal": "lower", "bibasilar": "lower", "bibasal": "lower",
         "retrocardiac": "lower", "infrahilar": "lower", "perihilar": "hilar",
         "hilar": "hilar", "hilum": "hilar", "parahilar": "hilar", "suprahilar": "upper",
         "costophrenic": "lower", "subpulmonic": "lower", "paratracheal": "mediastinal",
         "mediastinal": "mediastinal", "axillary": "lateral", "peripheral": "peripheral",
         "central": "central", "anterior": "anterior", "posterior": "posterior",
         "lateral": "lateral", "thoracic": "thoracic", "lumbar": "lumbar", "cervical":
         "cervical", "subclavian": "subclavian", "jugular": "jugular", "ij": "jugular",
         "atrium": "atrium", "ventricle": "ventricle", "svc": "svc", "cavoatrial": "svc"}
SEVERITY = {"trace": "minimal", "tiny": "minimal", "minimal": "minimal", "minute": "minimal",
            "slight": "minimal", "slightly": "minimal", "subtle": "minimal", "faint": "minimal",
            "small": "mild", "mild": "mild", "mildly": "mild", "little": "mild",
            "moderate": "moderate", "moderately": "moderate", "medium": "moderate",
            "large": "severe", "severe": "severe", "severely": "severe", "marked": "severe",
            "markedly": "severe", "extensive": "severe", "massive": "severe", "big": "severe",
            "substantial": "severe", "considerable": "severe", "huge": "severe",
            "gross": "severe"}
# words that narrow what a denial denies ("no focal consolidation" leaves streaky opacity
# possible, "no acute fracture" an old one): a flag does not call such a denial a contradiction
QUALIFIERS = frozenset({"focal", "acute", "definite", "definitive", "suspicious", "discrete",
                        "confluent", "significant", "displaced", "active", "overt", "frank",
                        "obvious", "typical", "dense", "lobar", "visible", "convincing",
                        "evident", "appreciable", "measurable", "sizable", "sizeable"})
UNITS_MM = {"mm": 1.0, "cm": 10.0, "millimeter": 1.0, "centimeter": 10.0}
# change words -> the kind of change they state ("comparison": one is made, no direction)
CHANGE = {"new": "new", "newly": "new", "interval development": "new", "developed": "new",
          "appeared": "new", "interval appearance": "new", "developing": "new",
          "increased": "worse", "increasing": "worse", "increase": "worse", "worsened": "worse",
          "worsening": "worse", "worse": "worse", "progressed": "worse",
          "progression": "worse", "progressive": "worse", "enlarging": "worse",
          "larger": "worse", "grown": "worse", "growing": "worse",
          "decreased": "better", "decreasing": "better", "decrease": "better",
          "improved": "better", "improving": "better", "improvement": "better",
          "smaller": "better", "less": "better", "reduced": "better", "regressed": "better",
          "diminished": "better", "lessened": "better", "shrinking": "better",
          "resolved": "resolved", "resolution": "resolved", "resolving": "resolved",
          "cleared": "resolved", "clearing": "resolved", "no longer": "resolved",
          "unchanged": "unchanged", "stable": "unchanged", "stably": "unchanged",
          "no change": "unchanged", "no interval change": "unchanged",
          "no significant change": "unchanged", "not changed": "unchanged",
          "no significant interval change": "unchanged", "no appreciable change": "unchanged",
          "without change": "unchanged", "without interval change": "unchanged",
          "similar": "unchanged", "persistent": "unchanged", "persists": "unchanged",
          "persist": "unchanged", "persisting": "unchanged", "again": "unchanged",
          "redemonstrated": "unchanged", "re demonstrated": "unchanged",
          "redemonstration": "unchanged", "remain": "unchanged", "remains": "unchanged",
          "remained": "unchanged", "constant": "unchanged", "not significantly changed":
          "unchanged", "compared": "comparison", "comparison": "comparison",
          "prior": "comparison", "previous": "comparison", "previously": "comparison",
          "interval": "comparison", "since": "comparison", "earlier": "comparison",
          "recent": "comparison", "preceding": "comparison", "baseline": "comparison"}
